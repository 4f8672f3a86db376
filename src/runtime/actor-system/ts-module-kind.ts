/**
 * A `.ts` / `.tsx` file is an ES module only inside a package whose package.json says
 * `"type": "module"`; elsewhere tsx compiles it to CommonJS, and importing the ESM-only
 * Ascent from it fails deep inside Node with an unhelpful "require() ... in a cycle".
 * This check turns that into a clear error before any rank starts. `.mts` is always ESM.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { InvalidArgumentError } from '../errors.js';

/** The nearest package.json above `file`, or undefined when there is none. */
function nearestPackageJson(file: string): string | undefined {
  for (let dir = dirname(file); ;) {
    const candidate = join(dir, 'package.json');
    if (existsSync(candidate)) return candidate;
    const up = dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
}

export function assertTsIsEsm(path: string, what: string): void {
  if (!/\.tsx?$/.test(path)) return;
  const pkg = nearestPackageJson(path);
  let type: unknown;
  if (pkg !== undefined) {
    try {
      type = (JSON.parse(readFileSync(pkg, 'utf8')) as { type?: unknown }).type;
    } catch {
      return; // an unreadable package.json is Node's to report
    }
  }
  if (type === 'module') return;
  const where = pkg === undefined ? 'no package.json was found above it' : `${pkg} has no "type": "module"`;
  throw new InvalidArgumentError(
    `The ${what} ${path} would load as CommonJS (${where}), but Ascent is an ES module package and its entries and actor modules must be ES modules. ` +
      `HINT: add "type": "module" to ${pkg ?? 'your package.json'}, or rename the file to .mts (always an ES module), or write it as .mjs.`,
    { path, packageJson: pkg ?? null },
  );
}
