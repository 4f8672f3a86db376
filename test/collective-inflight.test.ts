/**
 * Fail-fast with collectives in flight: every rank fires a run of allReduces without
 * awaiting them (so the stream may hold their completions back and post them as one run,
 * device/stream.h "Batched completions") while the culprit rank (2) fails at the third in
 * one way. Every test asserts: no hang, no lost completion (each op settles), the ops
 * before the failure succeed, the failed op names the culprit on every peer, the ops
 * queued behind it are reported as skipped, and stream.synchronize() reports the failure.
 * Wall-clock durations are never asserted.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, runRanks, type ErrInfo, type RankResult } from './helpers/comm-ranks.js';

const traceDir = mkdtempSync(join(tmpdir(), 'ascent-inflight-'));
const CULPRIT = 2;

beforeAll(() => ensureBuilt(), 120_000);
afterAll(() => rmSync(traceDir, { recursive: true, force: true }));

function scenario(nranks: number, name: string, extra: Record<string, unknown> = {}): Promise<RankResult[]> {
  return runRanks(nranks, { scenario: name, culprit: CULPRIT, traceDir, ...extra }, 50_000, undefined, 'comm-inflight-worker.mjs');
}

type Outcome = 'ok' | 'pending' | (ErrInfo & { thrownAtCall?: boolean });

function ops(r: RankResult): Outcome[] {
  expect(r.error, `rank ${r.rank} crashed`).toBeUndefined();
  const o = r.ops as Outcome[];
  expect(o, `rank ${r.rank} reported no ops`).toBeTruthy();
  expect(o, `rank ${r.rank}: a completion was lost`).not.toContain('pending');
  return o;
}

function failed(o: Outcome): ErrInfo & { thrownAtCall?: boolean } {
  expect(o).not.toBe('ok');
  return o as ErrInfo & { thrownAtCall?: boolean };
}

/**
 * The ops after the failed one: queued behind it, they are reported as skipped with the
 * failure as their cause; called once the communicator had aborted (a slow host), they
 * throw CommAbortedError naming the culprit at the call.
 */
function expectSkipped(rest: Outcome[], causeCode: string): void {
  expect(rest.length).toBeGreaterThan(0);
  for (const o of rest) {
    const e = failed(o);
    if (e.thrownAtCall) {
      expect(e.code).toBe('ASCENT_COMM_ABORTED');
      expect(e.details.culpritWorldRanks).toEqual([CULPRIT]);
      continue;
    }
    expect(e.code).toBe('ASCENT_STREAM_ERROR');
    expect(e.details.skippedOp).toBe('allReduce');
    expect(e.details.causeCode).toBe(causeCode);
    expect(e.message).toContain('Later work on this stream was skipped');
  }
}

function expectSync(r: RankResult, causeCode: string): ErrInfo {
  const e = r.sync as ErrInfo | null;
  expect(e, `rank ${r.rank}: synchronize() did not report the failure`).toBeTruthy();
  expect(e!.code).toBe('ASCENT_STREAM_ERROR');
  expect(e!.details.causeCode).toBe(causeCode);
  return e!;
}

/** A peer of the culprit: ops 1-2 succeed, op 3 fails with `code` naming the culprit, the rest are skipped. */
function expectPeer(r: RankResult, code: string, says: string): void {
  const o = ops(r);
  expect(o).toHaveLength(6);
  expect(o.slice(0, 2)).toEqual(['ok', 'ok']);
  const e = failed(o[2]!);
  expect(e.code).toBe(code);
  expect(e.message).toContain(says);
  expect(e.details.culpritWorldRanks).toEqual([CULPRIT]);
  expectSkipped(o.slice(3), code);
  // Its stream failed unless the op was refused at the call (then nothing ran on it).
  if (e.thrownAtCall) expect(r.sync).toBeNull();
  else expectSync(r, code);
}

describe('collectives in flight when a rank fails', () => {
  it("a rank's stream fails before its third allReduce: every peer fails at once naming it, later ops are skipped", async () => {
    const results = await scenario(4, 'streamFails');
    for (const r of results.filter((x) => x.rank !== CULPRIT)) expectPeer(r, 'ASCENT_COMM_ABORTED', "rank 2's stream");
    const o = ops(results[CULPRIT]!);
    expect(o.slice(0, 2)).toEqual(['ok', 'ok']);
    expectSkipped(o.slice(2), 'ASCENT_STREAM_ERROR');
    expect(expectSync(results[CULPRIT]!, 'ASCENT_STREAM_ERROR').message).toContain('injected failure');
  });

  it('the same with no completion on any op (NCCL style): the communicator aborts natively, synchronize() reports it', async () => {
    // Nobody awaits the skipped allReduces, so only the stream's skip can tell the peers;
    // without it they would wait out their 30 s deadline and report a timeout instead.
    const results = await scenario(4, 'streamFailsNoCompletions');
    for (const r of results.filter((x) => x.rank !== CULPRIT)) {
      const refused = r.refused as ErrInfo[];
      if (r.sync === null) {
        // A host preempted before it enqueued the third op: its calls were refused at once.
        expect(refused.length).toBeGreaterThan(0);
        expect(refused[0]!.code).toBe('ASCENT_COMM_ABORTED');
        expect(refused[0]!.details.culpritWorldRanks).toEqual([CULPRIT]);
        expect(refused[0]!.message).toContain("rank 2's stream");
        continue;
      }
      const e = expectSync(r, 'ASCENT_COMM_ABORTED');
      expect(e.details.causeMessage).toContain("rank 2's stream");
      expect(e.details.causeMessage).toContain('failed before its allReduce could run');
    }
    expect(expectSync(results[CULPRIT]!, 'ASCENT_STREAM_ERROR').message).toContain('injected failure');
  });

  it('a rank exits with ops in flight on its peers: each peer fails naming it', async () => {
    const results = await scenario(4, 'exits');
    expect(results[CULPRIT]!.exited).toBe(3);
    for (const r of results.filter((x) => x.rank !== CULPRIT)) expectPeer(r, 'ASCENT_COMM_ABORTED', "rank 2's worker exited");
  });

  it('a rank throws (its worker dies of an uncaught error): each peer fails naming it', async () => {
    const results = await scenario(4, 'throws');
    expect(String(results[CULPRIT]!.error)).toContain('the culprit rank threw');
    for (const r of results.filter((x) => x.rank !== CULPRIT)) expectPeer(r, 'ASCENT_COMM_ABORTED', "rank 2's worker exited");
  });

  it('a rank stalls: each peer gets the timeout report naming it, later ops skipped; the staller fails at once later', async () => {
    const results = await scenario(4, 'stalls', { execTimeoutMs: 1500 });
    for (const r of results.filter((x) => x.rank !== CULPRIT)) {
      expectPeer(r, 'ASCENT_COLLECTIVE_TIMEOUT', 'missing: rank 2');
      expect(failed(ops(r)[2]!).details.missing).toEqual([CULPRIT]);
    }
    const staller = results[CULPRIT]!;
    expect(ops(staller)).toEqual(['ok', 'ok']);
    const later = staller.later as ErrInfo;
    expect(later.code).toBe('ASCENT_COMM_ABORTED');
    expect(later.details.culpritWorldRanks).toEqual([CULPRIT]);
  });

  it('a rank calls the wrong collective: CollectiveMismatchError on every rank naming it, later ops skipped', async () => {
    const results = await scenario(4, 'wrongCollective');
    for (const r of results.filter((x) => x.rank !== CULPRIT)) {
      expectPeer(r, 'ASCENT_COLLECTIVE_MISMATCH', 'but rank 2 called broadcast(fp32, count=4, root=0)');
    }
    const o = ops(results[CULPRIT]!);
    expect(failed(o[2]!).code).toBe('ASCENT_COLLECTIVE_MISMATCH');
    expectSkipped(o.slice(3), 'ASCENT_COLLECTIVE_MISMATCH');
  });
});

describe('batched completions', () => {
  it('back-to-back allReduces awaited together: every result right, completions posted in runs', async () => {
    const results = await scenario(4, 'batched');
    let batched = 0;
    for (const r of results) {
      const o = ops(r);
      expect(o).toEqual(Array(40).fill('ok'));
      expect(r.sums).toEqual(Array.from({ length: 40 }, (_, i) => 6 + 4 * i));
      expect(r.sync).toBeNull();
      batched += r.batched as number;
    }
    // Posting one completion per op (no batching) leaves this at 0 on every rank.
    expect(batched).toBeGreaterThan(0);
  });

  it('a host that awaits an op while its next collective waits on a peer that waits for that host: no deadlock', async () => {
    // Rank 1 enqueues its second allReduce only once rank 0 saw its first complete; rank 0's
    // second is queued right behind the first, so its completion must not wait for it.
    const results = await scenario(2, 'deferredAwait', { execTimeoutMs: 20_000 });
    for (const r of results) {
      expect(ops(r)).toEqual(['ok', 'ok']);
      expect(r.sync).toBeNull();
      expect(r.sum).toEqual([3, 2, 4, 6]);
    }
  });
});
