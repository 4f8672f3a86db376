// The linter and the formatter (eslint.config.js, .prettierrc.json) are part of `npm test`:
// `npm run lint` must report nothing and every source file must be as Prettier writes it
// (`npm run format` fixes that). A planted unused variable and a badly formatted snippet
// prove both checks can fail.
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const ESLINT = join(ROOT, 'node_modules', 'eslint', 'bin', 'eslint.js');
const PRETTIER = join(ROOT, 'node_modules', 'prettier', 'bin', 'prettier.cjs');
const LINTED = ['src', 'bench', 'test', 'scripts', 'examples', 'bin'];
// Both tools parse every source file (~30 s of CPU each on the 2-core machine); their caches make
// a rerun re-check only the files whose content changed. A result is reused only for the same
// content under the same configuration and tool version (ESLint keys its cache on the config too;
// the rules here read one file at a time, none uses type information across files), so a cached
// run reports exactly what a cold one would. A fresh checkout starts cold.
const CACHE = join(ROOT, 'node_modules', '.cache', 'ascent-lint');
const ESLINT_CACHE = ['--cache', '--cache-strategy', 'content', '--cache-location', join(CACHE, 'eslint')];
const PRETTIER_CACHE = ['--cache', '--cache-strategy', 'content', '--cache-location', join(CACHE, 'prettier')];

function run(bin: string, args: string[], input?: string): { status: number | null; out: string } {
  const r = spawnSync(process.execPath, [bin, ...args], { cwd: ROOT, encoding: 'utf8', timeout: 240_000, ...(input !== undefined ? { input } : {}) });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

/** The same as run(), without blocking: the two whole-tree checks below run side by side. */
function start(bin: string, args: string[]): Promise<{ status: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], timeout: 240_000 });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.on('error', reject);
    child.on('close', (status, signal) => resolve({ status, out: signal ? `${out}\n(killed by ${signal})` : out }));
  });
}

describe('lint and format', () => {
  // Each tool is one single-threaded process over the whole tree: started together, they take
  // the time of the longer one instead of the sum whenever a core is free. Each test still
  // checks its own tool's output and exit status.
  let eslint: ReturnType<typeof start>;
  let prettier: ReturnType<typeof start>;
  beforeAll(() => {
    eslint = start(ESLINT, [...ESLINT_CACHE, ...LINTED]);
    prettier = start(PRETTIER, [...PRETTIER_CACHE, '--check', '--log-level', 'warn', '.']);
    // Neither promise rejects unhandled while the other test runs first.
    eslint.catch(() => {});
    prettier.catch(() => {});
  });

  it('eslint reports nothing (npm run lint)', async () => {
    const r = await eslint;
    expect(r.out).toBe('');
    expect(r.status).toBe(0);
  }, 300_000);

  it('every source file is formatted (npm run format:check)', async () => {
    const r = await prettier;
    expect(r.out).toBe('');
    expect(r.status).toBe(0);
  }, 300_000);

  it('both checks can fail', () => {
    const lint = run(ESLINT, ['--stdin', '--stdin-filename', 'src/probe.ts'], 'const unused = 1;\n');
    expect(lint.status).not.toBe(0);
    expect(lint.out).toContain('no-unused-vars');
    const messy = 'export const  x = {a:1,\nb: 2}\n';
    const fmt = run(PRETTIER, ['--stdin-filepath', 'src/probe.ts'], messy);
    expect(fmt.status).toBe(0);
    expect(fmt.out).toBe('export const x = { a: 1, b: 2 };\n');
  });
});
