// ctx.actors.get(rank) for a rank of another process: mpirun -np 2 x launch
// --nproc-per-node 2, rank 0 calling actors on ranks 1 (same process), 2 and 3.
import { describe, expect, it } from 'vitest';
import { mpiProcessPids, mpiSkipReason, mpirunLaunch } from './helpers/mpirun.js';

const skip = mpiSkipReason();
if (skip) console.warn(`[mpi-actors] skipping the mpirun tests: ${skip}`);

const FIXTURE = 'test/fixtures/launch/mpi-actors.mjs';

function result<T>(stdout: string): T {
  const line = /RESULT (\{.*\})/.exec(stdout)?.[1];
  expect(line, stdout).toBeDefined();
  return JSON.parse(line!) as T;
}

/** Runs `mode`; once rank 0 waits on a call to process 1, kills process 1 and at once SIGTERMs process 0 (as mpirun does, only sooner). */
async function killThenTerminate(mode: string) {
  const mark = `mpi-actors-${process.pid}-${Date.now()}`;
  let killed: number[] = [];
  let terminated: number[] = [];
  let signalled = false;
  const r = await mpirunLaunch(
    2,
    ['--nproc-per-node', '2', '--grace-period', '2', FIXTURE, mode],
    { ASCENT_TEST_MARK: mark, HCCL_EXEC_TIMEOUT: '600' },
    90_000,
    (stdout) => {
      if (signalled || !stdout.includes('WAITING on rank 2')) return;
      signalled = true;
      killed = mpiProcessPids(mark, 1);
      terminated = mpiProcessPids(mark, 0);
      for (const pid of killed) process.kill(pid, 'SIGKILL');
      for (const pid of terminated) process.kill(pid, 'SIGTERM');
    },
  );
  expect(killed.length, 'process 1 was found and killed').toBeGreaterThan(0);
  expect(terminated.length, 'process 0 was found and signalled').toBeGreaterThan(0);
  expect(r.code).not.toBe(0);
  // The dead process is the cause, never the signal alone (nor an exit before the report).
  expect(r.stderr).not.toMatch(/SIGTERM received \(under mpirun|terminating now/);
  return r;
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

  // mpirun answers a process's death by SIGTERMing the others, then SIGKILLs them 1 s later.
  // Here the SIGTERM comes at once, before process 0 can have seen the death (the end of its
  // actor connection): its report must name process 1 all the same, and before the SIGKILL.
  it("mpirun's SIGTERM racing a killed process: the report still names the rank's ActorDiedError, not the signal", async () => {
    const r = await killThenTerminate('teardown');
    expect(r.stderr).toMatch(
      /\[launch process 0 \(ranks 0-1\)\] rank 0 failed: ActorDiedError: Rank 2 is gone: process 1 \(ranks 2-3\) is gone: its actor connection closed/,
    );
    expect(r.stderr).toMatch(
      /\[launch process 0 \(ranks 0-1\)\] FAILED: 1 of 2 ranks of this process failed \(culprit: rank 0, failed with ActorDiedError.*\); exit code 1/,
    );
  }, 120_000);

  it("mpirun's SIGTERM while a rank computes: the report names the dead process before mpirun's SIGKILL", async () => {
    // Rank 0 cannot fail or stop for 20 s (grace period 2 s): the report cannot wait for it.
    const r = await killThenTerminate('teardown-busy');
    expect(r.stderr).toMatch(
      /\[launch process 0 \(ranks 0-1\)\] SIGTERM received: mpirun is stopping the job after a process died \(process 1 \(ranks 2-3\) is gone/,
    );
    expect(r.stderr).toMatch(
      /\[launch process 0 \(ranks 0-1\)\] FAILED: process 1 \(ranks 2-3\) is gone: its actor connection closed \(then mpirun stopped the job\); this process's ranks were stopped; exit code 1/,
    );
  }, 120_000);
});
