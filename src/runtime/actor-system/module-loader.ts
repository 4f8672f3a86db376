/**
 * Loads user modules (actor modules, `launch` entries) inside a rank worker.
 * `.js` / `.mjs` load natively; `.ts` / `.mts` / `.cts` load through tsx, a
 * dependency of Ascent, registered once per thread on first use.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { isAbsolute, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { InvalidArgumentError } from '../errors.js';
import { assertTsIsEsm } from './ts-module-kind.js';

const TS_EXT = /\.(c|m)?tsx?$/;
let tsxRegistered: Promise<void> | undefined;

// The package's entries beside this file in the build (dist/src/index.js for 'ascent',
// dist/src/internal.js for 'ascent/internal'). None when this module runs from the TypeScript
// sources (vitest): the caller's thread holds the source copy of the library there, and importing
// the built copy beside it would load the library twice.
const BUILT = import.meta.url.endsWith('.js');
const PACKAGE_ENTRIES: Record<string, string> = { ascent: '../../index.js', 'ascent/internal': '../../internal.js' };
// An import of a value (not `import type`) from the package: `import { a } from 'ascent'`,
// `import * as x from 'ascent/internal'`, `export { b } from 'ascent'`.
const PACKAGE_IMPORT = /(?:^|[\n;])\s*(?:import|export)\s+(?!type\s)[^;'"]*?\bfrom\s*['"](ascent(?:\/internal)?)['"]/g;

/** The package entries ('ascent', 'ascent/internal') a module's source imports values from, each once. */
export function packageValueImports(source: string): string[] {
  return [...new Set([...source.matchAll(PACKAGE_IMPORT)].map((m) => m[1]!))];
}

async function ensureTsx(): Promise<void> {
  tsxRegistered ??= import('tsx/esm/api').then((m) => {
    m.register();
  });
  return tsxRegistered;
}

/**
 * Once tsx's hooks are registered, every later import in the thread (each of the library's ~240
 * modules too) is resolved and loaded through tsx's hooks thread: about three times the CPU of a
 * plain import (~2 s instead of ~0.7 s, in every rank). So before a TS module that imports values
 * from the package is loaded, the package entry it names is imported plainly; its `from 'ascent'`
 * then resolves to the module already loaded, and tsx handles only the user's own files. A module
 * that imports only types from the package (or nothing) loads nothing extra.
 */
async function preloadPackageEntries(url: string): Promise<void> {
  if (!BUILT) return;
  let source: string;
  try {
    source = readFileSync(fileURLToPath(url), 'utf8');
  } catch {
    return; // the import below reports an unreadable module itself
  }
  for (const spec of packageValueImports(source)) {
    const entry = fileURLToPath(new URL(PACKAGE_ENTRIES[spec]!, import.meta.url));
    // Only when the module's own `from 'ascent'` resolves to this very copy (a project with its own
    // install of Ascent beside a launcher from another would otherwise load the library twice).
    if (existsSync(entry) && resolvesTo(url, spec, entry)) await import(pathToFileURL(entry).href);
  }
}

function resolvesTo(moduleUrl: string, spec: string, file: string): boolean {
  try {
    return createRequire(moduleUrl).resolve(spec) === file;
  } catch {
    return false; // not resolvable from there: the module's import reports that itself
  }
}

/** Resolves a path or file URL (relative paths against `cwd`) to a file URL string; checks it exists. */
export function resolveModuleUrl(spec: string | URL, what: string, cwd = process.cwd()): string {
  let path: string;
  if (spec instanceof URL) {
    if (spec.protocol !== 'file:') throw new InvalidArgumentError(`Expected a file: URL for ${what} but received ${spec.href}`);
    path = fileURLToPath(spec);
  } else if (spec.startsWith('file:')) {
    path = fileURLToPath(spec);
  } else {
    path = isAbsolute(spec) ? spec : resolve(cwd, spec);
  }
  if (!existsSync(path)) {
    throw new InvalidArgumentError(
      `The ${what} ${JSON.stringify(String(spec))} does not exist (looked at ${path}). HINT: paths are relative to the current directory (${cwd}).`,
      { path },
    );
  }
  assertTsIsEsm(path, what);
  return pathToFileURL(path).href;
}

export async function importModule(url: string): Promise<Record<string, unknown>> {
  if (TS_EXT.test(new URL(url).pathname)) {
    await preloadPackageEntries(url);
    await ensureTsx();
  }
  return (await import(url)) as Record<string, unknown>;
}

export function isClass(fn: unknown): fn is new (...args: unknown[]) => unknown {
  return typeof fn === 'function' && /^class[\s{]/.test(Function.prototype.toString.call(fn));
}
