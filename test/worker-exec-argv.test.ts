import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { refusedOptions, withoutOptions, workerExecArgv } from '../src/runtime/actor-system/worker-exec-argv.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

describe('worker execArgv', () => {
  it('drops the options that only make sense for a main script', () => {
    expect(workerExecArgv(['--input-type=module', '-e', 'x()', '--enable-source-maps'])).toEqual(['--enable-source-maps']);
    expect(workerExecArgv(['--input-type', 'module', '--print', '1', '--no-warnings', '-i'])).toEqual(['--no-warnings']);
  });

  it("reads the refused options from Node's error and drops them with their separate values", () => {
    expect(refusedOptions('Initiated Worker with invalid execArgv flags: --max-old-space-size=4096, --expose-gc')).toEqual([
      '--max-old-space-size=4096',
      '--expose-gc',
    ]);
    expect(refusedOptions('some other message')).toBeNull();
    expect(withoutOptions(['--title', 'x', '--expose-gc', '--enable-source-maps', '--max-old-space-size=64'], ['--title', '--max-old-space-size=64'])).toEqual([
      '--expose-gc',
      '--enable-source-maps',
    ]);
  });

  // Before: ERR_WORKER_INVALID_EXEC_ARGV out of World.create; not one rank started.
  it('launch under V8 options starts every rank, and the options are in effect in the ranks and the task pool', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ascent-execargv-'));
    const script = join(dir, 'heap.mjs');
    writeFileSync(
      script,
      `import v8 from 'node:v8';
export async function main(ctx) {
  console.log('rank ' + ctx.rank + ' heapLimitMb ' + Math.round(v8.getHeapStatistics().heap_size_limit / 2 ** 20) + ' gc ' + typeof globalThis.gc);
}
`,
    );
    const run = (nodeArgs: string[]) =>
      spawnSync(process.execPath, [...nodeArgs, join(ROOT, 'bin', 'launch.mjs'), '--nproc', '2', script], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
    const limits = (out: string) => [...out.matchAll(/rank (\d) heapLimitMb (\d+) gc (\w+)/g)].map((m) => ({ rank: Number(m[1]), mb: Number(m[2]), gc: m[3] }));

    const plain = run([]);
    expect(plain.status, plain.stderr).toBe(0);
    const withFlags = run(['--max-old-space-size=1500', '--expose-gc']);
    expect(withFlags.status, withFlags.stderr).toBe(0);
    expect(withFlags.stderr).toContain('ASCENT_WORKER_EXEC_ARGV');
    expect(withFlags.stderr).toContain('--max-old-space-size=1500 --expose-gc');

    const base = limits(plain.stdout);
    const flagged = limits(withFlags.stdout);
    expect(base.map((r) => r.rank).sort()).toEqual([0, 1]);
    expect(flagged.map((r) => r.rank).sort()).toEqual([0, 1]);
    // The heap limit follows the flag (old space + young generation), well below the default's.
    for (const r of flagged) {
      expect(r.mb).toBeGreaterThanOrEqual(1500);
      expect(r.mb).toBeLessThan(1700);
      expect(r.gc).toBe('function');
    }
    for (const r of base) expect(r.mb).not.toBe(flagged[0]!.mb);

    // The task pool (Piscina) starts its workers under the same options.
    const pool = spawnSync(
      process.execPath,
      [
        '--max-old-space-size=1500',
        '--input-type=module',
        '-e',
        `import { World } from 'ascent';
const world = await World.create({ size: 1, deviceMemory: '64MiB' });
try { console.log('square ' + (await world.tasks.run({ module: ${JSON.stringify(new URL('./fixtures/tasks.mjs', import.meta.url).href)}, export: 'square' }, 7))); }
finally { await world.shutdown(); }`,
      ],
      { cwd: ROOT, encoding: 'utf8', timeout: 60_000 },
    );
    expect(pool.status, pool.stderr).toBe(0);
    expect(pool.stdout).toContain('square 49');
  });
});
