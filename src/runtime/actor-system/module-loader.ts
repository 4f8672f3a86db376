/**
 * Loads user modules (actor modules, `launch` entries) inside a rank worker.
 * `.js` / `.mjs` load natively; `.ts` / `.mts` / `.cts` load through tsx, a
 * dependency of Ascent, registered once per thread on first use.
 */
import { existsSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { InvalidArgumentError } from '../errors.js';
import { assertTsIsEsm } from './ts-module-kind.js';

const TS_EXT = /\.(c|m)?tsx?$/;
let tsxRegistered: Promise<void> | undefined;

async function ensureTsx(): Promise<void> {
  tsxRegistered ??= import('tsx/esm/api').then((m) => {
    m.register();
  });
  return tsxRegistered;
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
  if (TS_EXT.test(new URL(url).pathname)) await ensureTsx();
  return (await import(url)) as Record<string, unknown>;
}

export function isClass(fn: unknown): fn is new (...args: unknown[]) => unknown {
  return typeof fn === 'function' && /^class[\s{]/.test(Function.prototype.toString.call(fn));
}
