/**
 * The profiler on a real 2-rank training step under `launch` with ASCENT_PROFILE: each
 * rank's Chrome trace is valid (every event well formed, async spans paired, a stream's
 * ops in FIFO order without overlap) and complete (as many ops on the default stream as
 * the stream itself counted; the step's kernels, collectives, host waits and the actor
 * call on both sides), and `ascent profile` merges the ranks and ranks the ops.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, ROOT } from './helpers/parallel-launch.js';
import type { TraceEvent } from '../src/runtime/profiler.js';

const dir = mkdtempSync(join(tmpdir(), 'ascent-profile-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function checkTrace(file: string, rank: number): TraceEvent[] {
  const parsed = JSON.parse(readFileSync(file, 'utf8')) as { traceEvents: TraceEvent[] };
  const ev = parsed.traceEvents;
  expect(Array.isArray(ev)).toBe(true);
  const open = new Map<number, TraceEvent>();
  const lastEnd = new Map<number, number>();
  for (const e of ev) {
    expect(typeof e.name).toBe('string');
    expect(['X', 'b', 'e', 'M']).toContain(e.ph);
    expect(Number.isFinite(e.ts)).toBe(true);
    expect(e.pid).toBe(rank);
    expect(Number.isInteger(e.tid)).toBe(true);
    if (e.ph === 'X') {
      expect(e.dur).toBeGreaterThanOrEqual(0);
      // One stream runs one op at a time: its ops never overlap.
      expect(e.ts).toBeGreaterThanOrEqual((lastEnd.get(e.tid) ?? -Infinity) - 1e-3);
      lastEnd.set(e.tid, e.ts + e.dur!);
    } else if (e.ph === 'b') open.set(e.id!, e);
    else if (e.ph === 'e') {
      const b = open.get(e.id!);
      expect(b?.name).toBe(e.name);
      expect(e.ts).toBeGreaterThanOrEqual(b!.ts);
      open.delete(e.id!);
    }
  }
  expect([...open.values()].map((e) => e.name)).toEqual([]);
  return ev;
}

describe('profiler (ASCENT_PROFILE)', () => {
  it('a rank writes its trace before it reports: a large trace survives a grace period of 0', async () => {
    ensureParallelBuilt();
    const big = join(dir, 'big');
    const r = spawnSync(
      process.execPath,
      [join(ROOT, 'bin', 'launch.mjs'), '--nproc', '2', '--grace-period', '0', '--no-prefix', join(ROOT, 'test/fixtures/launch/profile-many-ops.mjs')],
      { cwd: ROOT, encoding: 'utf8', env: { ...process.env, ASCENT_DEVICE_MEMORY: '64MiB', ASCENT_PROFILE: big }, timeout: 120_000 },
    );
    expect(r.status, r.stderr).toBe(0);
    const results = r.stdout
      .split('\n')
      .filter((l) => l.startsWith('RESULT '))
      .map((l) => JSON.parse(l.slice(7)) as { rank: number; stream: number; completed: number });
    expect(results.map((x) => x.rank).sort()).toEqual([0, 1]);
    for (const x of results) {
      const file = join(big, `rank-${x.rank}.trace.json`);
      expect(existsSync(file), file).toBe(true);
      const ev = (JSON.parse(readFileSync(file, 'utf8')) as { traceEvents: TraceEvent[] }).traceEvents;
      const onStream = ev.filter((e) => e.ph === 'X' && e.tid === 100 + x.stream);
      expect(onStream.length).toBeGreaterThanOrEqual(100_000);
      expect(onStream.length).toBe(x.completed);
    }
  });

  it('writes a valid, complete trace per rank for a 2-rank training step, and ascent profile merges them', async () => {
    ensureParallelBuilt();
    const run = await launchFixture(2, 'test/fixtures/launch/profile-step.mjs', [], { ASCENT_PROFILE: dir });
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.results.map((r) => r.rank)).toEqual([0, 1]);
    expect(run.results[0]!.reply).toBe(42);
    for (const r of run.results) {
      const ev = checkTrace(join(dir, `rank-${r.rank}.trace.json`), r.rank);
      const ops = ev.filter((e) => e.ph === 'X');
      const names = new Set(ops.map((e) => e.name));
      for (const want of ['allGather', 'reduceScatter', 'allReduce', 'barrier']) expect(names, want).toContain(want);
      expect(ops.some((e) => e.cat === 'kernel' && /matmul/i.test(e.name))).toBe(true);
      expect(ops.some((e) => e.cat === 'kernel' && /adamw/i.test(e.name))).toBe(true);
      // Complete: every op the default stream ran is in the trace, once.
      const onStream = ops.filter((e) => e.tid === 100 + (r.stream as number));
      expect(onStream.length).toBe(r.completed);
      expect(new Set(onStream.map((e) => e.args!.seq)).size).toBe(onStream.length);
      expect(ev.some((e) => e.ph === 'b' && e.cat === 'sync')).toBe(true);
      const actor = ev.filter((e) => e.ph === 'b' && e.cat === 'actor').map((e) => e.name);
      expect(actor).toContain(r.rank === 0 ? 'probe.ping -> rank 1' : 'probe.ping (run on rank 1)');
    }
    const cli = spawnSync(process.execPath, [join(ROOT, 'bin', 'ascent.mjs'), 'profile', dir, '--json'], { encoding: 'utf8' });
    expect(cli.status, cli.stderr).toBe(0);
    const s = JSON.parse(cli.stdout) as { ranks: number[]; ops: Array<{ name: string; count: number; totalMs: number; share: number }>; merged: string };
    expect(s.ranks).toEqual(expect.arrayContaining([0, 1]));
    expect(existsSync(s.merged)).toBe(true);
    const shares = s.ops.reduce((a, o) => a + o.share, 0);
    expect(shares).toBeCloseTo(1, 6);
    expect(s.ops.map((o) => o.totalMs)).toEqual([...s.ops.map((o) => o.totalMs)].sort((a, b) => b - a));
    const merged = JSON.parse(readFileSync(s.merged, 'utf8')) as { traceEvents: TraceEvent[] };
    expect(new Set(merged.traceEvents.map((e) => e.pid))).toEqual(new Set([0, 1, 10_000]));
    const table = spawnSync(process.execPath, [join(ROOT, 'bin', 'ascent.mjs'), 'profile', dir], { encoding: 'utf8' });
    expect(table.stdout).toMatch(/Top \d+ stream ops by total time/);
    expect(table.stdout).toMatch(/allGather/);
    const bad = spawnSync(process.execPath, [join(ROOT, 'bin', 'ascent.mjs'), 'profile', join(dir, 'nope')], { encoding: 'utf8' });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/cannot read .*nope.*HINT: pass the folder given as ASCENT_PROFILE/);
  }, 120_000);
});
