/**
 * Failure injection for communicators. Every test asserts: no hang, an error on
 * EVERY rank, and what the message says. Wall-clock durations are never asserted
 * (timeouts here are short per-communicator overrides so the suite stays fast).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Communicator } from '../src/runtime/comm/comm-index.js';
import { Device, Tensor } from '../src/runtime/device/device-index.js';
import { ensureBuilt, rankError, runAbortById, runScenario, type ErrInfo, type RankResult } from './helpers/comm-ranks.js';

const traceDir = mkdtempSync(join(tmpdir(), 'ascent-fail-'));

beforeAll(() => ensureBuilt(), 120_000);
afterAll(() => rmSync(traceDir, { recursive: true, force: true }));

const err = rankError;
const scenario = (nranks: number, name: string, extra: Record<string, unknown> = {}): Promise<RankResult[]> => runScenario(traceDir, nranks, name, extra);

describe('collective failures', () => {
  it('a rank that skips a collective: every waiter gets the same timeout report naming it; the dump names it too', async () => {
    const results = await scenario(4, 'skip', { execTimeoutMs: 1500 });
    const waiters = results.filter((r) => r.rank !== 2);
    const messages = new Set<string>();
    for (const r of waiters) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COLLECTIVE_TIMEOUT');
      expect(e.name).toBe('CollectiveTimeoutError');
      expect(e.message).toContain('at seq 2');
      expect(e.message).toContain('allReduce(fp32, count=4, op=sum)');
      expect(e.message).toContain('arrived: ranks [0,1,3]');
      expect(e.message).toContain('missing: rank 2');
      expect(e.details.culpritWorldRanks).toEqual([2]);
      expect(e.details.missing).toEqual([2]);
      expect(e.details.arrived).toEqual([0, 1, 3]);
      expect(e.message).toContain('rank 2: last enqueued #1 allReduce, started #1 allReduce, completed #1 allReduce');
      expect(e.message).toMatch(
        /Flight recorder: .*\.json\nHINT: run `ascent trace [^`]*` \(`npx --no-install ascent trace \.\.\.` where Ascent is installed, `npm run ascent -- trace \.\.\.` in its clone\)$/,
      );
      messages.add(e.message);
      // After the error: at once, synchronously.
      expect(err(r, 'later').code).toBe('ASCENT_COMM_ABORTED');
      const dump = r.dump as {
        format: string;
        cause: { code: string; seq: number };
        ranks: Array<{ rank: number; lastCompleted: { seq: number }; entries: Array<{ seq: number; state: string }> }>;
      };
      expect(dump.format).toBe('ascent.flight-recorder');
      expect(dump.cause.code).toBe('ASCENT_COLLECTIVE_TIMEOUT');
      expect(dump.cause.seq).toBe(2);
      expect(dump.ranks).toHaveLength(4);
      expect(dump.ranks[2]!.lastCompleted.seq).toBe(1);
      expect(dump.ranks[2]!.entries.map((e) => e.seq)).toEqual([1]);
      expect(dump.ranks[0]!.entries.map((e) => e.seq)).toEqual([1, 2]);
    }
    expect(messages.size).toBe(1); // the same report on every waiting rank
    const skipper = err(results[2]!, 'later');
    expect(skipper.code).toBe('ASCENT_COMM_ABORTED');
    expect(skipper.message).toContain('missing: rank 2');
    expect(skipper.details.culpritWorldRanks).toEqual([2]);
  });

  it('two ranks call different ops at the same step: CollectiveMismatchError on every rank naming both', async () => {
    const results = await scenario(4, 'mismatchOp');
    for (const r of results) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COLLECTIVE_MISMATCH');
      expect(e.name).toBe('CollectiveMismatchError');
      expect(e.message).toContain('at seq 1: ranks [0,1,3] called allReduce(fp32, count=1024, op=sum) but rank 2 called broadcast(fp32, count=1024, root=0).');
      expect(e.details.culpritWorldRanks).toEqual([2]);
      expect(err(r, 'later').details.culpritWorldRanks).toEqual([2]);
      expect(err(r, 'later').code).toBe('ASCENT_COMM_ABORTED');
      const dump = r.dump as { cause: { message: string }; ranks: Array<{ entries: Array<{ fingerprint: string }> }> };
      expect(dump.ranks[2]!.entries[0]!.fingerprint).toBe('broadcast(fp32, count=1024, root=0)');
      expect(dump.ranks[0]!.entries[0]!.fingerprint).toBe('allReduce(fp32, count=1024, op=sum)');
      expect(dump.cause.message).toContain('but rank 2 called broadcast');
    }
  });

  it("a failed collective's stack names the user's call site, not only the runtime's frames", async () => {
    for (const r of await scenario(2, 'callerStack')) {
      expect(r.code).toBe('ASCENT_COLLECTIVE_MISMATCH');
      // The frame right after the communicator's own (comm.ts): the fixture function that made the call.
      const frames = (r.stack as string).split('\n').filter((l) => l.trim().startsWith('at '));
      const user = frames.findIndex((l) => /at userCallSite \(.*comm-worker\.mjs:\d+:\d+\)/.test(l));
      expect(user).toBeGreaterThan(0);
      expect(frames.slice(0, user).every((l) => l.includes('/runtime/comm/comm.'))).toBe(true);
    }
  });

  it('same op, different count', async () => {
    for (const r of await scenario(4, 'mismatchCount')) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COLLECTIVE_MISMATCH');
      expect(e.message).toContain('ranks [0,2,3] called allReduce(fp32, count=1024, op=sum) but rank 1 called allReduce(fp32, count=512, op=sum)');
      expect(e.details.culpritWorldRanks).toEqual([1]);
    }
  });

  it('different root', async () => {
    for (const r of await scenario(4, 'mismatchRoot')) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COLLECTIVE_MISMATCH');
      expect(e.message).toContain('ranks [0,1,2] called broadcast(fp32, count=16, root=0) but rank 3 called broadcast(fp32, count=16, root=1)');
      expect(e.details.culpritWorldRanks).toEqual([3]);
    }
  });

  it('allToAllV counts that do not pair up name the pair', async () => {
    for (const r of await scenario(3, 'mismatchAllToAllV')) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COLLECTIVE_MISMATCH');
      expect(e.message).toContain('rank 1 sends 2 elements to rank 2 (sendCounts[2]) but rank 2 expects 1 from rank 1 (recvCounts[1])');
      expect(e.details.culpritWorldRanks).toEqual([1, 2]); // one bad pair: both sides are suspects
    }
  });

  it('a rank exits mid-collective: peers fail with CommAbortedError naming the dead rank', async () => {
    const results = await scenario(4, 'exitMidCollective');
    expect(results[3]!.exited).toBe(1);
    for (const r of results.slice(0, 3)) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COMM_ABORTED');
      expect(e.message).toContain("rank 3's worker exited");
      expect(e.details.culpritWorldRanks).toEqual([3]);
      expect(err(r, 'later').code).toBe('ASCENT_COMM_ABORTED');
    }
  });

  it('Communicator.abortById() from the main thread wakes every rank, whatever it waits in', async () => {
    const results = await runAbortById(3, traceDir, "rank 2's worker died (test)");
    for (const r of results) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COMM_ABORTED');
      expect(e.message).toContain("rank 2's worker died (test)");
      expect(e.details.culpritWorldRanks).toEqual([]); // abortById without culprits: unknown
    }
    expect(Communicator.abortById('0'.repeat(32), 'nobody')).toBe(false);
  });

  it('a send and its recv that disagree in size: CollectiveMismatchError on both', async () => {
    for (const r of await scenario(2, 'p2pMismatch')) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COLLECTIVE_MISMATCH');
      expect(e.message).toContain("rank 0's send #1 to rank 1 is fp32 count=3 but rank 1's recv #1 from rank 0 is fp32 count=2");
      expect(e.details.culpritWorldRanks).toEqual([0, 1]);
    }
  });

  it('ranks that exit at different times after their last collective do not fail each other', async () => {
    for (const r of await scenario(8, 'staggeredExit')) {
      expect(r.error).toBeUndefined();
      expect(r.errs).toEqual([]);
      expect(r.max).toBe(7);
    }
  });

  it('an unawaited failing collective is reported by stream.synchronize(), never as an unhandled rejection', async () => {
    for (const r of await scenario(2, 'fireAndForget')) {
      const e = err(r, 'sync');
      expect(e.code).toBe('ASCENT_STREAM_ERROR');
      expect(e.details.causeCode).toBe('ASCENT_COLLECTIVE_MISMATCH');
      expect(e.message).toContain('rank 0 called allReduce(fp32, count=1, op=sum)');
    }
  });

  it("one rank's collectives on two streams run in seq order", async () => {
    const P = 3;
    for (const r of await scenario(P, 'twoStreams')) {
      expect(r.errs).toEqual([null, null]);
      expect(r.x).toBe(6); // sum of 1..3
      expect(r.y).toBe(6); // max over ranks of the already reduced x
    }
  });

  it('initRank: duplicate rank and nranks disagreement are synchronous InvalidArgumentErrors naming both sides', async () => {
    const id = Communicator.uniqueId();
    const first = Communicator.initRank({ uniqueId: id, nranks: 2, rank: 0, device: 0, connectTimeoutMs: 300, traceDir });
    expect(() => Communicator.initRank({ uniqueId: id, nranks: 2, rank: 0, device: 1, traceDir })).toThrow(
      /Rank 0 joined communicator .* twice \(first from device 0, now from device 1\)/,
    );
    expect(() => Communicator.initRank({ uniqueId: id, nranks: 3, rank: 1, device: 1, traceDir })).toThrow(/nranks=3 but an earlier rank .* said nranks=2/);
    expect(() => Communicator.initRank({ uniqueId: id, nranks: 2, rank: 2, device: 1, traceDir })).toThrow(
      /Expected an integer in \[0, 1\] for rank but received 2/,
    );
    expect(() => Communicator.initRank({ uniqueId: 'nope', nranks: 2, rank: 0, device: 0 })).toThrow(/32 hex digits/);
    await expect(first).rejects.toMatchObject({ code: 'ASCENT_COLLECTIVE_TIMEOUT', message: expect.stringContaining('missing: rank 1') });
  });

  it('destroy() is local; later calls are InvalidArgumentErrors', async () => {
    const comm = await Communicator.initRank({ uniqueId: Communicator.uniqueId(), nranks: 1, rank: 0, device: 0, traceDir });
    const x = Tensor.fromArray(Device.get(0), [1, 2], [2]);
    await comm.allReduce(x, x, 'sum');
    comm.destroy();
    expect(() => comm.allReduce(x, x, 'sum')).toThrow(/was destroyed/);
    expect(() => comm.allReduce(x, x, 'bogus' as never)).toThrow(/was destroyed|Expected one of sum/);
  });

  it('abort() wakes every waiter at once', async () => {
    const results = await scenario(3, 'abortWakes');
    for (const r of results.slice(1)) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_COMM_ABORTED');
      expect(e.message).toContain('rank 0 called abort(): test abort');
      expect(e.details.culpritWorldRanks).toEqual([0]);
    }
  });

  it('a rank throws before init: the others get the connect timeout report naming it', async () => {
    const results = await scenario(4, 'initMissing', { missing: 3, connectTimeoutMs: 1000 });
    expect(results[3]!.error).toContain('rank fails before init');
    const messages = new Set<string>();
    for (const r of results.slice(0, 3)) {
      const e = err(r, 'init');
      expect(e.code).toBe('ASCENT_COLLECTIVE_TIMEOUT');
      expect(e.message).toContain('only 3 of 4 ranks joined');
      expect(e.message).toContain('joined: ranks [0,1,2]');
      expect(e.message).toContain('missing: rank 3');
      expect(e.details.culpritWorldRanks).toEqual([3]);
      expect(e.message).toContain('HINT: run `ascent trace ');
      messages.add(e.message);
    }
    expect(messages.size).toBe(1);
  });

  it('split with an invalid color is a synchronous InvalidArgumentError without side effects', async () => {
    const results = await scenario(4, 'splitInvalid');
    for (const r of results) {
      expect(r.error).toBeUndefined();
      const errs = r.errs as ErrInfo[];
      expect(errs.map((e) => e.code)).toEqual(['ASCENT_INVALID_ARGUMENT', 'ASCENT_INVALID_ARGUMENT', 'ASCENT_INVALID_ARGUMENT']);
      expect(errs[0]!.message).toContain('1.5 of type number');
      expect(errs[1]!.message).toContain('-1 / null for no communicator');
      expect(r.after).toBeNull();
      expect(r.sum).toBe(6);
      expect(r.child).toEqual({ rank: Math.floor(r.rank / 2), size: 2 });
    }
  });

  it('a stream or tensor of the wrong device is a synchronous InvalidArgumentError without side effects', async () => {
    for (const r of await scenario(2, 'wrongStream')) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_INVALID_ARGUMENT');
      expect(e.message).toContain(`Expected a stream of device ${r.rank}`);
      expect(e.message).toContain(`belongs to device ${r.rank + 100}`);
      const e2 = err(r, 'err2');
      expect(e2.code).toBe('ASCENT_INVALID_ARGUMENT');
      expect(e2.message).toContain(`on device ${r.rank + 100}`);
      expect(r.noSideEffect).toBe(true);
      expect(r.after).toBeNull();
      expect(r.sum).toEqual([2, 4]);
    }
  });

  it('two ranks blocked in plain sends to each other: P2PDeadlockError on both naming the cycle', async () => {
    for (const r of await scenario(2, 'deadlock')) {
      const e = err(r);
      expect(e.code).toBe('ASCENT_P2P_DEADLOCK');
      expect(e.name).toBe('P2PDeadlockError');
      expect(e.message).toContain('ranks [0,1] wait for each other in a cycle');
      expect(e.message).toContain('blocked in send #1 to rank 1');
      expect(e.message).toContain('blocked in send #1 to rank 0');
      expect(e.message).toContain('groupStart()');
      expect(e.details.culpritWorldRanks).toEqual([0, 1]);
    }
  });
});
