// Trainers whose group spans processes (mpirun -np P ascent launch --nproc-per-node N): fsdp2,
// and megatron with data parallelism only, train over ranks of several processes as the same
// ranks do in one process; megatron's tp / ep, which cannot yet, is refused with a ConfigError
// on every rank (no crash, no hang).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { mpiSkipReason, mpirunLaunch } from './helpers/mpirun.js';
import { launchFixture } from './helpers/parallel-launch.js';

const skip = mpiSkipReason();
if (skip) console.warn(`[mpi-train] skipping the mpirun tests: ${skip}`);

const FIXTURE = 'test/fixtures/train/span-train.mjs';
const STEPS = 3;
const dir = mkdtempSync(join(tmpdir(), 'ascent-mpi-train-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface TrainResult {
  rank: number;
  size: number;
  losses: number[];
  norms: number[];
  params: string;
}

function results<T extends { rank: number }>(stdout: string): T[] {
  return stdout
    .split('\n')
    .filter((l) => l.startsWith('RESULT '))
    .map((l) => JSON.parse(l.slice(7)) as T)
    .sort((a, b) => a.rank - b.rank);
}

/** `strategy` on `nproc` ranks in one process: the reference. */
async function inOneProcess(nproc: number, out: string, strategy = 'fsdp2'): Promise<TrainResult[]> {
  const r = await launchFixture(nproc, FIXTURE, [strategy, String(STEPS), out], {}, 240_000);
  expect(r.code, r.stderr).toBe(0);
  return r.results as unknown as TrainResult[];
}

async function acrossProcesses(np: number, perProcess: number, out: string, strategy = 'fsdp2'): Promise<TrainResult[]> {
  const r = await mpirunLaunch(np, ['--nproc-per-node', String(perProcess), '--no-prefix', FIXTURE, strategy, String(STEPS), out], {}, 240_000);
  expect(r.code, r.stderr).toBe(0);
  return results<TrainResult>(r.stdout);
}

function maxRelErr(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < b.length; i++) {
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  return diff / scale;
}

const floats = (path: string) => {
  const b = readFileSync(path);
  return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
};

describe.skipIf(skip !== null)('trainer groups that span processes under mpirun', () => {
  it('fsdp2 dp=2 across 2 processes (1 rank each): every step and the final parameters equal the run in one process, bit for bit', async () => {
    const across = await acrossProcesses(2, 1, join(dir, 'across-2.bin'));
    const one = await inOneProcess(2, join(dir, 'one-2.bin'));
    expect(across.map((r) => r.rank)).toEqual([0, 1]);
    expect(across.every((r) => r.size === 2 && r.losses.length === STEPS)).toBe(true);
    // Bit-equal: with one rank per process the only reduction between ranks is a sum of two
    // fp32 values (gradients, grad norm, loss), which is the same float in either order; the
    // gathers move bytes unchanged and the batches are seeded.
    const pick = (r: TrainResult) => ({ losses: r.losses, norms: r.norms, params: r.params });
    expect(across.map(pick)).toEqual(one.map(pick));
    expect(readFileSync(join(dir, 'across-2.bin')).equals(readFileSync(join(dir, 'one-2.bin')))).toBe(true);
  }, 600_000);

  it('fsdp2 dp=4 on 2 processes x 2 ranks: the run in one process within fp32 summation-order tolerance', async () => {
    const across = await acrossProcesses(2, 2, join(dir, 'across-4.bin'));
    const one = await inOneProcess(4, join(dir, 'one-4.bin'));
    expect(across.map((r) => r.rank)).toEqual([0, 1, 2, 3]);
    // Every rank of the spanning run holds the same parameters.
    expect(new Set(across.map((r) => r.params)).size).toBe(1);
    // Not bit-equal: across processes four ranks' gradients are summed as (r0 + r1) + (r2 + r3)
    // (each process, then between processes), in one process in another association. That is
    // ~1e-7 relative per sum; after three AdamW steps (eps 1e-3, clipped at norm 1) the parameters
    // differ by at most ~1 ulp (measured 1.2e-7 of their scale). 1e-5 leaves room for that, while a
    // stale or missing gradient moves parameters by O(lr) = 1e-2.
    for (let i = 0; i < STEPS; i++) {
      expect(Math.abs(across[0]!.losses[i]! - one[0]!.losses[i]!) / Math.abs(one[0]!.losses[i]!), `loss ${i}`).toBeLessThan(1e-5);
      expect(Math.abs(across[0]!.norms[i]! - one[0]!.norms[i]!) / one[0]!.norms[i]!, `norm ${i}`).toBeLessThan(1e-5);
    }
    expect(maxRelErr(floats(join(dir, 'across-4.bin')), floats(join(dir, 'one-4.bin')))).toBeLessThan(1e-5);
  }, 600_000);

  it('megatron dp=2 (tp=1, ep=1) across 2 processes: every step and the final parameters equal the run in one process, bit for bit', async () => {
    const across = await acrossProcesses(2, 1, join(dir, 'megatron-across.bin'), 'megatron');
    const one = await inOneProcess(2, join(dir, 'megatron-one.bin'), 'megatron');
    expect(across.map((r) => r.rank)).toEqual([0, 1]);
    expect(across.every((r) => r.size === 2 && r.losses.length === STEPS)).toBe(true);
    // Bit-equal for the reason above (sums of two fp32 values). Without awaiting its gradient
    // all-reduces across processes, the process leaders diverge from the first step.
    const pick = (r: TrainResult) => ({ losses: r.losses, norms: r.norms, params: r.params });
    expect(across.map(pick)).toEqual(one.map(pick));
    expect(readFileSync(join(dir, 'megatron-across.bin')).equals(readFileSync(join(dir, 'megatron-one.bin')))).toBe(true);
  }, 600_000);

  it('megatron tp=2 on ranks of 2 processes is refused on every rank with a ConfigError and a HINT (no crash, no hang)', async () => {
    const r = await mpirunLaunch(2, ['--nproc-per-node', '1', '--no-prefix', FIXTURE, 'megatron', '1', join(dir, 'unused.bin'), '2'], {}, 120_000);
    expect(r.code, r.stderr).toBe(0);
    const got = results<{ rank: number; error: { name: string; code: string; message: string } | null }>(r.stdout);
    expect(got.map((x) => x.rank)).toEqual([0, 1]);
    for (const { error } of got) {
      expect(error).not.toBeNull();
      expect(error!.name).toBe('ConfigError');
      expect(error!.code).toBe('ASCENT_CONFIG');
      expect(error!.message).toMatch(
        /MegatronStrategy\.create\(\): megatron runs only data parallelism \(tp=1, ep=1\) on ranks of more than one process in this build, but got tp=2, ep=1/,
      );
      expect(error!.message).toMatch(/HINT: across processes use tp=1 and ep=1, or strategy 'fsdp2'/);
    }
  }, 300_000);
});
