import { describe, expect, it } from 'vitest';
import { describeRanks, groupFailures, isUsageFailure, pickCulprit, type RankOutcome } from '../src/runtime/actor-system/launch-report.js';

const timeout = (rank: number, missing: number[] | undefined, order: number): RankOutcome => ({
  rank,
  end: 'failed',
  order,
  error: {
    name: 'CollectiveTimeoutError',
    code: 'ASCENT_COLLECTIVE_TIMEOUT',
    message: `rank ${rank} waited at seq 2`,
    details: missing ? { culpritWorldRanks: missing } : {},
  },
});

describe('launch report: the culprit', () => {
  it('a rank that failed on its own is the culprit even when a victim failed first', () => {
    const aborted: RankOutcome = {
      rank: 0,
      end: 'failed',
      order: 0,
      error: { name: 'CommAbortedError', code: 'ASCENT_COMM_ABORTED', message: 'aborted', details: { culpritWorldRanks: [2] } },
    };
    const own: RankOutcome = { rank: 2, end: 'failed', order: 1, error: { name: 'Error', message: 'boom' } };
    expect(pickCulprit([aborted, own, { rank: 1, end: 'stopped' }])?.ranks).toEqual([2]);
  });

  it('collective errors vote with details.culpritWorldRanks (a skipped collective: the missing rank)', () => {
    const outcomes = [timeout(0, [3], 0), timeout(1, [3], 1), timeout(2, [3], 2), { rank: 3, end: 'stopped' } as RankOutcome];
    const c = pickCulprit(outcomes)!;
    expect(c.ranks).toEqual([3]);
    expect(c.reason).toMatch(/named by the collective errors of 3 failed ranks/);
  });

  it('a mismatch where every rank failed: the differing rank named by the errors, not the first to fail', () => {
    const outcomes = [0, 1, 2, 3].map((r) => ({
      rank: r,
      end: 'failed' as const,
      order: r === 1 ? 0 : r + 1,
      error: {
        name: 'CollectiveMismatchError',
        code: 'ASCENT_COLLECTIVE_MISMATCH',
        message: 'ranks [0,1,3] called allReduce but rank 2 called broadcast',
        details: { culpritWorldRanks: [2] },
      },
    }));
    expect(pickCulprit(outcomes)?.ranks).toEqual([2]);
  });

  it('the most named ranks win the vote', () => {
    const outcomes = [timeout(0, [3], 0), timeout(1, [3, 2], 1), timeout(3, [2], 2), timeout(4, [2], 3)];
    expect(pickCulprit(outcomes)?.ranks).toEqual([2]);
  });

  it('without the field: a rank that exited with code 0 mid-collective is the culprit, not a victim', () => {
    const outcomes = [timeout(0, undefined, 0), { rank: 1, end: 'exited', exitCode: 0 } as RankOutcome, timeout(2, undefined, 1)];
    const c = pickCulprit(outcomes)!;
    expect(c.ranks).toEqual([1]);
    expect(c.reason).toMatch(/exited while the others waited/);
  });

  it('without the field: a rank that hung is the culprit; one still outside the collective is a suspect', () => {
    expect(pickCulprit([timeout(0, undefined, 0), { rank: 1, end: 'hung' }, timeout(2, undefined, 1)])).toMatchObject({
      ranks: [1],
      reason: expect.stringMatching(/hung/),
    });
    expect(pickCulprit([timeout(0, undefined, 0), { rank: 1, end: 'done' }, timeout(2, undefined, 1)])?.ranks).toEqual([1]);
  });

  it('a crash or a non-zero exit is a failure of its own', () => {
    const exited: RankOutcome = { rank: 5, end: 'exited', exitCode: 3, order: 4 };
    expect(pickCulprit([timeout(0, undefined, 0), exited])).toMatchObject({ ranks: [5], reason: expect.stringMatching(/exited with code 3/) });
    expect(pickCulprit([{ rank: 0, end: 'done' }])).toBeUndefined();
  });
});

describe('launch report: grouping', () => {
  it('the same error on every rank is one group, even when each message names its own rank', () => {
    const outcomes = [0, 1, 2, 3].map((r) => ({
      rank: r,
      end: 'failed' as const,
      order: 3 - r,
      error: { name: 'CommAbortedError', code: 'ASCENT_COMM_ABORTED', message: `rank ${r}'s allReduce cannot run. Cause: rank 9's worker exited` },
    }));
    const groups = groupFailures(outcomes);
    expect(groups).toHaveLength(1);
    expect(groups[0]!.ranks).toEqual([0, 1, 2, 3]);
    expect(groups[0]!.shownRank).toBe(3);
    expect(describeRanks(groups[0]!.ranks, 4)).toBe('all 4 ranks');
  });

  it('different errors stay apart, and the culprit group comes first', () => {
    const other: RankOutcome = { rank: 3, end: 'failed', order: 3, error: { name: 'Error', message: 'boom' } };
    const outcomes: RankOutcome[] = [timeout(0, undefined, 0), timeout(1, undefined, 1), { rank: 2, end: 'exited', exitCode: 3, order: 2 }, other];
    const groups = groupFailures(outcomes, [2]);
    expect(groups.map((g) => g.ranks)).toEqual([[2], [0, 1], [3]]);
    expect(groups[0]!.how).toBe('exited with code 3');
    expect(describeRanks([0, 1], 4)).toBe('ranks [0, 1]');
  });

  it('a run that failed only on ConfigErrors (plus aborted collectives around them) is a usage failure', () => {
    const config: RankOutcome = { rank: 0, end: 'failed', order: 0, error: { name: 'ConfigError', code: 'ASCENT_CONFIG', message: 'steps: bad' } };
    const aborted: RankOutcome = { rank: 1, end: 'failed', order: 1, error: { name: 'CommAbortedError', code: 'ASCENT_COMM_ABORTED', message: 'aborted' } };
    expect(isUsageFailure([config, aborted])).toBe(true);
    expect(isUsageFailure([config, { rank: 1, end: 'failed', order: 1, error: { name: 'Error', message: 'boom' } }])).toBe(false);
    expect(isUsageFailure([aborted])).toBe(false);
  });
});
