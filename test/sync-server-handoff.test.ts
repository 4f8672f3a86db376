/**
 * A server-mode trainer rank's sync() returns once its transfers are enqueued on its default
 * stream (src/sync/in-flight.ts; test/fixtures/sync/server-handoff.mjs, fsdp2 dp2 → two tp-1
 * engine ranks, the tiny model as one gathered round):
 *   - the trainers' sync() resolves before the engine ranks have joined (they wait for the
 *     trainers in a world barrier the trainers enter after it: a sync that waited for its
 *     transfers would deadlock here until the guard); weights the trainers then zero on their
 *     default stream reach the engines as they were at sync(); drain() resolves;
 *   - when the transfer then fails (the engines abort the sync communicator), the trainers'
 *     drain(), their default stream and their next sync() all report it, naming the cause.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';

beforeAll(() => ensureParallelBuilt());

type Outcome = { ok: boolean; code?: string; message?: string };
type Result = {
  rank: number;
  trainer: boolean;
  gathers: number;
  sync?: Outcome;
  drain?: Outcome;
  stream?: Outcome;
  next?: Outcome;
  inFlightAfterSync?: boolean;
  inFlightAfterDrain?: boolean;
  zeroed?: boolean;
  got?: Record<string, string>;
  want?: Record<string, string>;
  maxDiff?: number;
};

describe('server-mode trainer ranks hand their transfers to the default stream', () => {
  it('sync() returns before the engines join; the weights are sent as they were at sync(), not as the next writes left them', async () => {
    const run = await launchFixture(4, 'test/fixtures/sync/server-handoff.mjs', ['order'], {}, 90_000);
    expect(run.code, run.stderr).toBe(0);
    const rs = run.results as unknown as Result[];
    expect(rs.map((r) => r.rank).sort()).toEqual([0, 1, 2, 3]);
    for (const r of rs) {
      const tag = `rank ${r.rank}`;
      expect(r.sync!.ok, `${tag}: ${r.sync!.message}`).toBe(true);
      expect(r.gathers, tag).toBe(1);
      if (r.trainer) {
        expect(r.inFlightAfterSync, tag).toBe(true);
        expect(r.drain!.ok, `${tag}: ${r.drain!.message}`).toBe(true);
        expect(r.inFlightAfterDrain, tag).toBe(false);
        // The writes behind the transfer did happen.
        expect(r.zeroed, tag).toBe(true);
      } else {
        expect(Object.keys(r.got!).length, tag).toBeGreaterThan(5);
        expect(r.got, tag).toEqual(r.want);
        expect(r.maxDiff, tag).toBe(0);
      }
    }
  }, 100_000);

  it('a transfer that fails after sync() returned is reported by drain(), the default stream and the next sync()', async () => {
    const run = await launchFixture(4, 'test/fixtures/sync/server-handoff.mjs', ['fail'], {}, 90_000);
    expect(run.code, run.stderr).toBe(0);
    const rs = run.results as unknown as Result[];
    expect(rs.map((r) => r.rank).sort()).toEqual([0, 1, 2, 3]);
    for (const r of rs.filter((x) => x.trainer)) {
      const tag = `rank ${r.rank}`;
      expect(r.sync!.ok, tag).toBe(true);
      expect(r.drain!.ok, tag).toBe(false);
      expect(r.drain!.code, tag).toBe('ASCENT_WEIGHT_SYNC');
      expect(r.drain!.message, tag).toContain('transfers from this trainer rank failed after it returned');
      for (const o of [r.drain!, r.stream!, r.next!]) {
        expect(o.ok, tag).toBe(false);
        expect(o.message, tag).toContain('the engine ranks gave up on this sync (injected)');
      }
    }
  }, 100_000);
});
