// ctx.actors.get(rank) for a rank of another process: mpirun -np 2 x launch
// --nproc-per-node 2, rank 0 calling actors on ranks 1 (same process), 2 and 3.
import { describe, expect, it } from 'vitest';
import { mpiSkipReason, mpirunLaunch } from './helpers/mpirun.js';

const skip = mpiSkipReason();
if (skip) console.warn(`[mpi-actors] skipping the mpirun tests: ${skip}`);

const FIXTURE = 'test/fixtures/launch/mpi-actors.mjs';

function result<T>(stdout: string): T {
  const line = /RESULT (\{.*\})/.exec(stdout)?.[1];
  expect(line, stdout).toBeDefined();
  return JSON.parse(line!) as T;
}

describe.skipIf(skip !== null)('actors across processes under mpirun (2 processes x 2 ranks)', () => {
  it('calls, returns and remote errors (class, code, stack) reach an actor of another process as within one', async () => {
    const r = await mpirunLaunch(2, ['--nproc-per-node', '2', FIXTURE, 'ok']);
    expect(r.code, r.stderr).toBe(0);
    const out = result<Record<string, unknown>>(r.stdout);
    expect(out.who).toEqual([
      { rank: 1, pid: expect.any(Number), node: '0', samePid: true },
      { rank: 2, pid: expect.any(Number), node: '1', samePid: false },
      { rank: 3, pid: expect.any(Number), node: '1', samePid: false },
    ]);
    expect(out.add).toEqual({ sum: 42, from: 2 });
    expect(out.scaled).toEqual({ type: 'Float32Array', values: [0, 2, 4] });
    expect(out.ascent).toEqual({
      name: 'InvalidArgumentError',
      code: 'ASCENT_INVALID_ARGUMENT',
      isClass: true,
      message: 'bad input on rank 2. HINT: thrown on purpose by the test',
      rank: 2,
      actor: 'echo',
      details: { rank: 2 },
      header: true,
      frame: true,
    });
    expect(out.plain).toEqual({ name: 'TypeError', remoteName: 'TypeError', message: 'plain failure on rank 2', frame: true });
    expect(out.unknown).toEqual({ code: 'ASCENT_INVALID_ARGUMENT', message: expect.stringMatching(/^Actor echo on rank 2 has no method "noSuchMethod"/) });
    expect(out.proxy).toEqual({
      code: 'ASCENT_INVALID_ARGUMENT',
      message: expect.stringMatching(
        /^An actor call to actor echo on rank 2 carries something that cannot cross processes \(a MessagePort: .*HINT: pass plain data/,
      ),
    });
    // The connection still works after the refused call.
    expect(out.mesh).toEqual([0, 1, 2, 3]);
  }, 120_000);

  it('a call to a rank of another process whose worker exits rejects with ActorDiedError naming it', async () => {
    const r = await mpirunLaunch(2, ['--nproc-per-node', '2', '--grace-period', '2', FIXTURE, 'rank-dies'], { HCCL_EXEC_TIMEOUT: '600' });
    // The worker exited with code 0 (a clean end for the launcher): the job itself ends cleanly.
    expect(r.code, r.stderr).toBe(0);
    const out = result<{ name: string; isClass: boolean; rank: number; message: string; after: string }>(r.stdout);
    expect(out).toMatchObject({ name: 'ActorDiedError', isClass: true, rank: 3, after: 'ActorDiedError' });
    expect(out.message).toMatch(/^Rank 3 is gone: process 1: rank 3's worker is gone \(worker exited with code 0\) \(call echo\.slow could not complete\)/);
    expect(r.ms).toBeLessThan(60_000);
  }, 120_000);

  it('a call to a rank of a process that is killed rejects with ActorDiedError naming the process (no hang)', async () => {
    const r = await mpirunLaunch(2, ['--nproc-per-node', '2', '--grace-period', '2', FIXTURE, 'process-dies'], { HCCL_EXEC_TIMEOUT: '600' });
    expect(r.code).not.toBe(0);
    const out = result<{ name: string; isClass: boolean; rank: number; message: string; after: string }>(r.stdout);
    expect(out).toMatchObject({ name: 'ActorDiedError', isClass: true, rank: 2, after: 'ActorDiedError' });
    expect(out.message).toMatch(/^Rank 2 is gone: process 1 \(ranks 2-3\) is gone: its actor connection closed/);
    expect(r.ms).toBeLessThan(60_000);
  }, 120_000);
});
