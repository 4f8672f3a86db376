// send / recv, allToAll, allToAllV, reduceScatter and split across processes:
// mpirun -np 2 x launch --nproc-per-node 2 = 4 ranks, exact results on every rank,
// then a mismatch between processes and a receive that passes its deadline.
import { describe, expect, it } from 'vitest';
import { mpiSkipReason, mpirunLaunch } from './helpers/mpirun.js';

const skip = mpiSkipReason();
if (skip) console.warn(`[mpi-collectives] skipping the mpirun tests: ${skip}`);

const FIXTURE = 'test/fixtures/launch/mpi-collectives.mjs';
const SIZE = 4;

interface Result {
  rank: number;
  fromOther: number[];
  fromNeighbour: number[];
  plain?: number[];
  allToAll: number[];
  allToAllV: number[];
  reduceScatterMax: number[];
  byLocal: { rank: number; size: number; sum: number[]; gather: number[]; peer: number[] };
  byNode: { rank: number; size: number; sum: number[] } | null;
  splitAgain: { size: number; sum: number[] };
  ragged: Array<{ rank: number; size: number; broadcast: number[]; sum: number[]; gather: number[]; p2p: number[]; refused: string | null }>;
}

function results(stdout: string): Result[] {
  return stdout
    .split('\n')
    .map((l) => /RESULT (\{.*\})/.exec(l)?.[1])
    .filter((j): j is string => j !== undefined)
    .map((j) => JSON.parse(j) as Result)
    .sort((a, b) => a.rank - b.rank);
}

/** What rank r receives in the fixture's allToAllV: from each q, q + r + 1 elements valued 1000q + 10r + j. */
function allToAllV(r: number): number[] {
  return Array.from({ length: SIZE }, (_, q) => Array.from({ length: q + r + 1 }, (_, j) => 1000 * q + 10 * r + j)).flat();
}

describe.skipIf(skip !== null)('collectives across processes under mpirun (2 processes x 2 ranks)', () => {
  it('send / recv, allToAll, allToAllV, reduceScatter and split give exact results on every rank', async () => {
    const r = await mpirunLaunch(2, ['--nproc-per-node', '2', FIXTURE, 'ok']);
    expect(r.code, r.stderr).toBe(0);
    const rs = results(r.stdout);
    expect(rs.map((x) => x.rank)).toEqual([0, 1, 2, 3]);
    for (const x of rs) {
      const other = (x.rank + 2) % SIZE;
      expect(x.fromOther).toEqual([other * 10 + 1, other * 10 + 2]);
      expect(x.fromNeighbour).toEqual([(x.rank ^ 1) * 100]);
      // chunk q of recv came from rank q: [100q + 10r, 100q + 10r + 1]
      expect(x.allToAll).toEqual(Array.from({ length: SIZE }, (_, q) => [100 * q + 10 * x.rank, 100 * q + 10 * x.rank + 1]).flat());
      expect(x.allToAllV).toEqual(allToAllV(x.rank));
      expect(x.reduceScatterMax).toEqual([10 * x.rank + 3, 0]);
      const local = x.rank % 2;
      expect(x.byLocal).toEqual({ rank: x.rank >> 1, size: 2, sum: [local + (local + 2)], gather: [local, local + 2], peer: [(x.rank + 2) % SIZE] });
      expect(x.splitAgain).toEqual({ size: 2, sum: [local + 1 + (local + 3)] });
      expect(x.byNode).toEqual(x.rank === 3 ? null : { rank: x.rank % 2, size: x.rank < 2 ? 2 : 1, sum: [x.rank < 2 ? 1 : 2] });
      // Ragged fan-outs {f, 2, 3} (f = 0, 1): one rank of process 0, two of process 1.
      const fans = x.rank < 2 ? [x.rank] : [0, 1];
      expect(x.ragged).toEqual(
        fans.map((f) => ({
          rank: x.rank < 2 ? 0 : x.rank - 1,
          size: 3,
          broadcast: [7 + f, 0.5],
          sum: [f + 5],
          gather: [f, 2, 3],
          p2p: [x.rank === 3 ? 100 + f : 0],
          refused: expect.stringMatching(
            /^InvalidStateError: reduceScatter\(\) is not supported on a ragged communicator across processes \(ranks per process \[1, 2\]\)\. HINT:/,
          ),
        })),
      );
    }
    expect(rs[2]!.plain).toEqual([5, 6, 7, 8]);
  }, 120_000);

  it('processes calling different collectives fail fast on every rank with a fingerprint report naming both', async () => {
    const r = await mpirunLaunch(2, ['--nproc-per-node', '2', '--grace-period', '2', FIXTURE, 'mismatch'], { HCCL_EXEC_TIMEOUT: '600' });
    expect(r.code).not.toBe(0);
    expect(r.ms).toBeLessThan(60_000);
    const report =
      /CollectiveMismatchError: reduceScatter\(\) between processes .*processes called different collectives: process 0 called reduceScatter\(.*\), process 1 called allToAll\(/;
    expect(r.stderr).toMatch(new RegExp(`\\[launch process 0 \\(ranks 0-1\\)\\] .*${report.source}`));
    expect(r.stderr).toMatch(/\[launch process 1 \(ranks 2-3\)\] .*CollectiveMismatchError: allToAll\(\) between processes .*process 1 called allToAll\(/);
    expect(r.stderr).toMatch(/\[launch process 0 \(ranks 0-1\)\] FAILED: all 2 ranks of this process failed/);
    expect(r.stderr).toMatch(/\[launch process 1 \(ranks 2-3\)\] FAILED: /);
  }, 120_000);

  it('one rank calling a different collective: its process fails on the fingerprint, the other at once, both blaming that rank', async () => {
    const r = await mpirunLaunch(2, ['--nproc-per-node', '2', '--grace-period', '2', FIXTURE, 'mismatch-rank'], { HCCL_EXEC_TIMEOUT: '600' });
    expect(r.code).not.toBe(0);
    expect(r.ms).toBeLessThan(60_000);
    // Rank 3's local leg (allToAll gathers first) meets rank 2's (reduceScatter combines first) in process 1's fingerprint check.
    // Which of the two sees the mismatch itself and which the abort that follows it is a race: the report then says
    // "ranks [2, 3] failed with the same error" or lists rank 2's and rank 3's errors one by one.
    expect(r.stderr).toMatch(
      /\[launch process 1 \(ranks 2-3\)\] (ranks \[2, 3\] failed with the same error|rank [23] failed:) .*CollectiveMismatchError: .*rank 0 called allReduce\(.*\) but rank 1 called allGather\(/,
    );
    // Process 0 stops on process 1's abort; or, when process 1's refusal of their cross-process leg reaches process 0's
    // ranks before the abort reaches its launcher, its ranks fail on that refusal first (a CommAbortedError).
    expect(r.stderr).toMatch(
      /\[launch process 0 \(ranks 0-1\)\] (stopping this process's ranks: process 1 aborted the job: \[culprit ranks 3\]|.*CommAbortedError: .*reduceScatter\(\) between processes .*net reduceScatter refused)/,
    );
    expect(r.stderr).toMatch(/\[launch process 0 \(ranks 0-1\)\] FAILED: .*culprit: rank 3/);
    expect(r.stderr).toMatch(/\[launch process 1 \(ranks 2-3\)\] FAILED: .*culprit: rank 3/);
  }, 120_000);

  it('allToAllV counts that disagree across processes fail on every rank alike, naming the pair', async () => {
    const r = await mpirunLaunch(2, ['--nproc-per-node', '2', FIXTURE, 'counts']);
    expect(r.code, r.stderr).toBe(0);
    const rs = r.stdout
      .split('\n')
      .map((l) => /RESULT (\{.*\})/.exec(l)?.[1])
      .filter((j): j is string => j !== undefined)
      .map((j) => JSON.parse(j) as { rank: number; error: { name: string; message: string; culprits: number[] } | null })
      .sort((a, b) => a.rank - b.rank);
    expect(rs.map((x) => x.rank)).toEqual([0, 1, 2, 3]);
    for (const x of rs) {
      expect(x.error).toEqual({
        name: 'CollectiveMismatchError',
        message: expect.stringMatching(/^allToAllV\(\) across processes: the counts disagree: rank 0 sends 1 elements to rank 3, which expects 2\. HINT:/),
        culprits: [0, 3],
      });
    }
  }, 120_000);

  it('a receive whose sender never sends fails at the exec deadline, and the other process is stopped (no hang)', async () => {
    const r = await mpirunLaunch(2, ['--nproc-per-node', '2', '--grace-period', '2', FIXTURE, 'deadline'], { HCCL_EXEC_TIMEOUT: '3' });
    expect(r.code).not.toBe(0);
    expect(r.ms).toBeLessThan(60_000);
    expect(r.stderr).toMatch(
      /\[launch process 0 \(ranks 0-1\)\] .*CollectiveTimeoutError: recv\(\) from rank 2 \(rank 0, process 0 of 2\): net recv \(tag 0, from process 1\) .*did not complete within its deadline/,
    );
    expect(r.stderr).toMatch(/\[launch process 1 \(ranks 2-3\)\] stopping this process's ranks: process 0 aborted the job/);
  }, 120_000);
});
