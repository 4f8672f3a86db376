// Ranks on several processes: mpirun -np 2 x launch --nproc-per-node 2 = 4 ranks.
import { describe, expect, it } from 'vitest';
import { mpiSkipReason, mpirunLaunch } from './helpers/mpirun.js';

const skip = mpiSkipReason();
if (skip) console.warn(`[mpi-launch] skipping the mpirun tests: ${skip}`);

const FIXTURE = 'test/fixtures/launch/mpi-world.mjs';

interface Result {
  rank: number;
  localRank: number;
  worldSize: number;
  commRank: number;
  commSize: number;
  env: Record<string, string>;
  sum: number[];
  max: number[];
  avgInt: number[];
  broadcast: number[];
  allGather: number[];
  reduceScatter: number[];
}

function results(stdout: string): Result[] {
  return stdout
    .split('\n')
    .map((l) => /RESULT (\{.*\})/.exec(l)?.[1])
    .filter((j): j is string => j !== undefined)
    .map((j) => JSON.parse(j) as Result)
    .sort((a, b) => a.rank - b.rank);
}

describe.skipIf(skip !== null)('launch under mpirun (2 processes x 2 ranks)', () => {
  it('gives every rank its global and local place, and collectives span both processes exactly', async () => {
    const r = await mpirunLaunch(2, ['--nproc-per-node', '2', FIXTURE, 'ok']);
    expect(r.code, r.stderr).toBe(0);
    const rs = results(r.stdout);
    expect(rs.map((x) => x.rank)).toEqual([0, 1, 2, 3]);
    for (const x of rs) {
      const node = Math.floor(x.rank / 2);
      expect(x.env).toEqual({ RANK: String(x.rank), LOCAL_RANK: String(x.rank % 2), WORLD_SIZE: '4', LOCAL_WORLD_SIZE: '2', NODE_RANK: String(node) });
      expect([x.localRank, x.worldSize, x.commRank, x.commSize]).toEqual([x.rank % 2, 4, x.rank, 4]);
      // sum of [r + 1, 2^r, -r] over r = 0..3; max; int avg truncates (10+20+30+40)/4 = 25, 7
      expect(x.sum).toEqual([10, 15, -6]);
      expect(x.max).toEqual([4, 8, 0]);
      expect(x.avgInt).toEqual([25, 7]);
      expect(x.broadcast).toEqual([301, 302]);
      expect(x.allGather).toEqual([0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5]);
      expect(x.reduceScatter).toEqual([40 * x.rank + 6]);
    }
  }, 120_000);

  it("an entry's validateArgs sees the world and each process's share of it (placement decides on both)", async () => {
    const r = await mpirunLaunch(2, ['--nproc-per-node', '2', 'test/fixtures/launch/help.mjs', 'world']);
    expect(r.code, r.stderr).toBe(0);
    // Answered in the launcher, before any rank starts (no rank's "ran main" line).
    expect(r.stdout.trim().split('\n')).toEqual(['worldSize 4 localWorldSize 2']);
  }, 120_000);

  it('a rank that fails in one process makes the other process fail fast, naming it', async () => {
    const r = await mpirunLaunch(2, ['--nproc-per-node', '2', '--grace-period', '2', FIXTURE, 'fail'], { HCCL_EXEC_TIMEOUT: '600' });
    expect(r.code).not.toBe(0);
    // Well under the 600 s collective timeout: the abort notice, not a deadline, ended it.
    expect(r.ms).toBeLessThan(60_000);
    expect(r.stderr).toContain('rank 3 fails on purpose');
    // Process 0's report names process 1 and its failing rank, and blames rank 3.
    expect(r.stderr).toMatch(
      /\[launch process 0 \(ranks 0-1\)\] stopping this process's ranks: process 1 aborted the job: \[culprit ranks 3\] process 1 \(ranks 2-3\): rank 3 failed/,
    );
    expect(r.stderr).toMatch(/\[launch process 0 \(ranks 0-1\)\] FAILED: all 2 ranks of this process failed \(culprit: rank 3, /);
    expect(r.stderr).toMatch(/\[launch process 1 \(ranks 2-3\)\] FAILED: .*culprit: rank 3/);
  }, 120_000);

  it('a process that skips a collective: the net leg times out on the other, which then stops it (no hang)', async () => {
    const r = await mpirunLaunch(2, ['--nproc-per-node', '2', '--grace-period', '2', FIXTURE, 'skip'], { HCCL_EXEC_TIMEOUT: '3' });
    expect(r.code).not.toBe(0);
    expect(r.ms).toBeLessThan(60_000);
    expect(r.stderr).toMatch(
      /\[launch process 0 \(ranks 0-1\)\] .*CollectiveTimeoutError: allReduce\(\) between processes .*did not complete within its deadline/,
    );
    expect(r.stderr).toMatch(/\[launch process 1 \(ranks 2-3\)\] stopping this process's ranks: process 0 aborted the job/);
    expect(r.stderr).toMatch(/\[launch process 1 \(ranks 2-3\)\] FAILED: another process of the job failed/);
  }, 120_000);

  it('a process that is killed makes the job end fast with a report naming it (no hang)', async () => {
    const r = await mpirunLaunch(2, ['--nproc-per-node', '2', '--grace-period', '2', FIXTURE, 'kill'], { HCCL_EXEC_TIMEOUT: '600' });
    expect(r.code).not.toBe(0);
    expect(r.ms).toBeLessThan(60_000);
    // mpirun names the process that died; process 0 reports how it stopped.
    expect(r.stderr).toMatch(/process rank 1 with PID \d+ on node .* exited on signal 9/);
    expect(r.stderr).toMatch(/\[launch process 0 \(ranks 0-1\)\]/);
  }, 120_000);
});
