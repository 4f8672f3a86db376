/**
 * Collective failure reports name the right rank: real faults injected on real
 * ranks (a skipped collective on a split communicator, a mismatched op, a recv with
 * no send, a stalled rank, a rank that never calls split, a rank that exits), and on
 * EVERY rank `details.culpritWorldRanks` and the message name the world rank at
 * fault, with its local rank on a split. `ascent trace` on a fast abort reports
 * slower healthy ranks as not yet arrived, never as missing. No wall-clock asserts.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Communicator } from '../src/runtime/comm/comm-index.js';
import { explainDump, FlightDumpSchema } from '../src/runtime/actor-system/trace-explain.js';
import { ensureBuilt, rankError, runAbortById, runScenario, type RankResult } from './helpers/comm-ranks.js';

const traceDir = mkdtempSync(join(tmpdir(), 'ascent-culprit-'));

beforeAll(() => ensureBuilt(), 120_000);
afterAll(() => rmSync(traceDir, { recursive: true, force: true }));

const err = rankError;
const scenario = (nranks: number, name: string, extra: Record<string, unknown> = {}): Promise<RankResult[]> => runScenario(traceDir, nranks, name, extra);

function dumpAt(path: unknown) {
  expect(typeof path).toBe('string');
  return FlightDumpSchema.parse(JSON.parse(readFileSync(path as string, 'utf8')));
}

describe('collective failures name the culprit by world rank', () => {
  it('world rank 3 skips a collective on a split: its peers are told "missing: world rank 3 (local 0)"', async () => {
    const results = await scenario(6, 'splitSkip');
    expect(results.filter((r) => r.rank % 2 === 1).map((r) => [r.rank, r.local])).toEqual([
      [1, 1],
      [3, 0],
      [5, 2],
    ]);
    for (const r of [results[1]!, results[5]!]) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COLLECTIVE_TIMEOUT');
      expect(e.details.culpritWorldRanks).toEqual([3]);
      expect(e.details.missing).toEqual([3]);
      expect(e.details.missingLocal).toEqual([0]);
      expect(e.details.arrived).toEqual([1, 5]);
      expect(e.details.arrivedLocal).toEqual([1, 2]);
      expect(e.message).toContain('missing: world rank 3 (local 0)');
      expect(e.message).toContain('arrived: world ranks [1,5] (local [1,2])');
      expect(e.message).toContain('world rank 3 (local 0): last enqueued none');
      expect(e.message).not.toMatch(/missing: rank \d/);

      const dump = dumpAt(r.dumpPath);
      expect(dump.world).toBe(false);
      expect(dump.ranks.map((x) => x.worldRank)).toEqual([3, 1, 5]);
      expect(dump.cause.culpritWorldRanks).toEqual([3]);
      const findings = explainDump(dump).findings;
      expect(findings).toContainEqual({ kind: 'culprit', text: 'root cause: world rank 3 (local 0) (never arrived before the timeout).' });
      const missed = findings.filter((f) => f.kind === 'missed');
      expect(missed).toHaveLength(1);
      expect(missed[0]!.text).toMatch(
        /^seq 1: world rank 3 \(local 0\) never called allReduce\(fp32, count=2, op=sum\) \(issued by world ranks \[1, 5\] \(local \[1, 2\]\)\)/,
      );
      expect(findings.some((f) => f.kind === 'not-arrived')).toBe(false);
    }
    const skipper = err(results[3]!, 'later');
    expect(skipper.code).toBe('ASCENT_COMM_ABORTED');
    expect(skipper.details.culpritWorldRanks).toEqual([3]);
    expect(skipper.message).toContain("world rank 3 (local 0)'s barrier");
    for (const r of [results[0]!, results[2]!, results[4]!]) expect(r.err).toBeNull();
  });

  it('world rank 5 calls a different op on a split: every member names it, by world and local rank', async () => {
    const results = await scenario(6, 'splitMismatch');
    for (const r of results.filter((x) => x.rank % 2 === 1)) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COLLECTIVE_MISMATCH');
      expect(e.details.culpritWorldRanks).toEqual([5]);
      expect(e.details.expectedRanks).toEqual([3, 1]);
      expect(e.details.expectedRanksLocal).toEqual([0, 1]);
      expect(e.details.actualRanks).toEqual([5]);
      expect(e.message).toContain(
        'world ranks [3,1] (local [0,1]) called allReduce(fp32, count=2, op=sum) but world rank 5 (local 2) called broadcast(fp32, count=2, root=0)',
      );
      expect(e.message).toContain('differs: world rank 5 (local 2) (the majority called allReduce');
    }
  });

  it("a mismatch with no majority takes the lowest rank's call as the reference", async () => {
    for (const r of await scenario(2, 'mismatchTie')) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COLLECTIVE_MISMATCH');
      expect(e.details.culpritWorldRanks).toEqual([1]);
      expect(e.message).toContain('differs: rank 1 (no majority');
    }
  });

  it('a recv with no send: the receiver names the peer that never sent; the others learn it from the abort', async () => {
    const results = await scenario(3, 'recvNoSend', { execTimeoutMs: 1000 });
    const e = err(results[0]!);
    expect(e.code).toBe('ASCENT_COLLECTIVE_TIMEOUT');
    expect(e.details.culpritWorldRanks).toEqual([2]);
    expect(e.details.missing).toEqual([2]);
    expect(e.message).toContain('missing: rank 2');
    for (const r of results.slice(1)) {
      const later = err(r, 'later');
      expect(later.code).toBe('ASCENT_COMM_ABORTED');
      expect(later.details.culpritWorldRanks).toEqual([2]);
    }
  });

  it('a stalled rank is the culprit on every rank, itself included', async () => {
    const results = await scenario(4, 'stall', { execTimeoutMs: 1000, stallMs: 3000 });
    for (const r of results) {
      const e = err(r);
      expect(e.code).toBe(r.rank === 1 ? 'ASCENT_COMM_ABORTED' : 'ASCENT_COLLECTIVE_TIMEOUT');
      expect(e.details.culpritWorldRanks).toEqual([1]);
      expect(e.message).toContain('missing: rank 1');
    }
  });

  it('a rank whose stream is still busy is the culprit; the trace says its op was enqueued but never started', async () => {
    const results = await scenario(3, 'busyStream', { execTimeoutMs: 1000, stallMs: 3000 });
    for (const r of results) {
      const e = err(r);
      expect(e.details.culpritWorldRanks).toEqual([1]);
      expect(e.message).toContain('missing: rank 1');
    }
    const findings = explainDump(dumpAt(results[0]!.dumpPath)).findings;
    expect(findings.filter((f) => f.kind === 'missed')).toEqual([]);
    expect(findings).toContainEqual({
      kind: 'stuck',
      text: 'rank 1: allReduce(fp32, count=1, op=sum) (seq 1) was enqueued but never started: its stream was still busy with earlier work.',
    });
    expect(findings).toContainEqual({ kind: 'culprit', text: 'root cause: rank 1 (never arrived before the timeout).' });
  });

  it('a rank that never calls split: the split times out under connectTimeoutMs and names it', async () => {
    const results = await scenario(4, 'splitMissing', { execTimeoutMs: 120_000, splitConnectMs: 800 });
    for (const r of results.filter((x) => x.rank !== 2)) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COLLECTIVE_TIMEOUT');
      expect(e.details.culpritWorldRanks).toEqual([2]);
      expect(e.details.timeoutMs).toBe(800);
      expect(e.message).toContain('split()');
      expect(e.message).toContain('(connectTimeoutMs / HCCL_CONNECT_TIMEOUT)');
      expect(e.message).toContain('missing: rank 2');
    }
    expect(err(results[2]!, 'later').details.culpritWorldRanks).toEqual([2]);
  });

  it('a rank that calls process.exit(0) mid-collective is the culprit, not a victim', async () => {
    const results = await scenario(4, 'exitMidCollective', { exitCode: 0 });
    expect(results[3]!.exited).toBe(0);
    for (const r of results.slice(0, 3)) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COMM_ABORTED');
      expect(e.details.culpritWorldRanks).toEqual([3]);
      expect(err(r, 'later').details.culpritWorldRanks).toEqual([3]);
    }
  });

  it('Communicator.abortById(id, reason, culpritWorldRanks) hands the culprit to every rank; bad culprits are rejected', async () => {
    expect(() => Communicator.abortById('0'.repeat(32), 'x', [-1])).toThrow(/expected culpritWorldRanks to be an array of world ranks/);
    const results = await runAbortById(3, traceDir, "rank 2's worker is gone (test)", [2]);
    for (const r of results) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COMM_ABORTED');
      expect(e.details.culpritWorldRanks).toEqual([2]);
    }
  });

  it('`ascent trace` after a fast abort: slower healthy ranks had not yet arrived, they are not missing (5 runs)', async () => {
    for (let run = 0; run < 5; run++) {
      const results = await scenario(4, 'fastAbortSlow');
      expect(results[3]!.exited).toBe(0);
      const e = err(results[0]!);
      expect(e.code).toBe('ASCENT_COMM_ABORTED');
      expect(e.details.culpritWorldRanks).toEqual([3]);
      for (const r of results.slice(1, 3)) expect(err(r).details.culpritWorldRanks).toEqual([3]);
      const findings = explainDump(dumpAt(results[0]!.dumpPath)).findings;
      expect(
        findings.filter((f) => f.kind === 'missed'),
        `run ${run}`,
      ).toEqual([]);
      const late = findings.filter((f) => f.kind === 'not-arrived');
      expect(late, `run ${run}`).toHaveLength(1);
      expect(late[0]!.text).toMatch(
        /^seq 2: ranks \[1, 2, 3\] had not yet arrived at allReduce\(fp32, count=1, op=sum\) when the abort came, \d+ ms after rank 0 issued it/,
      );
      expect(findings).toContainEqual({ kind: 'culprit', text: 'root cause: rank 3 (died or aborted the communicator).' });
    }
  }, 120_000);
});
