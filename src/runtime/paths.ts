/**
 * Locations inside the Ascent package. Worker threads must start from built
 * JavaScript (dist/), also when the caller runs from TypeScript sources (vitest,
 * tsx): this maps `src/runtime/x.ts` to `dist/src/runtime/x.js` by package root.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { InvalidArgumentError, InternalError } from './errors.js';

function findPackageRoot(start: string): string {
  let dir = start;
  for (;;) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'binding.gyp'))) return dir;
    const up = dirname(dir);
    if (up === dir) throw new InternalError(`Cannot find the Ascent package root above ${start}`);
    dir = up;
  }
}

export const PACKAGE_ROOT = findPackageRoot(dirname(fileURLToPath(import.meta.url)));

/** URL of a built file under dist/src, e.g. `builtFile('runtime/actor-system/rank-worker.js')`. */
export function builtFile(rel: string): URL {
  const path = join(PACKAGE_ROOT, 'dist', 'src', rel);
  if (!existsSync(path)) {
    throw new InvalidArgumentError(`The built file ${path} is missing. HINT: run \`npm run build\` (npm install does it too).`, { path });
  }
  return pathToFileURL(path);
}
