/**
 * Faults in a gathered server-mode sync (one allToAllV over every rank for the whole tiny
 * model; test/fixtures/sync/server-gather-faults.mjs, fsdp2 dp2 → two tp-1 engine ranks):
 *   - one element of the bucket an engine rank received is changed in transit (before it is
 *     sliced into the parameters): verification fails on every rank, naming that engine rank,
 *     the tensor and both fingerprints; the next clean sync passes;
 *   - an engine rank fails inside the sync before taking part in the transfer: every other
 *     rank fails at once (not at the 30-minute collective deadline) with CommAbortedError
 *     naming that rank and its error.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';

beforeAll(() => ensureParallelBuilt());

type Outcome = { ok: boolean; name?: string; code?: string; message?: string; details?: Record<string, any> | null; verified?: Record<string, any> | null };
type Result = { rank: number; trainer: boolean; clean: Outcome; faulty: Outcome; after?: Outcome; gathers: number; broadcasts: number };

describe('gathered server-mode sync under faults', () => {
  it('a corrupted element of a received bucket is caught on every rank, naming the engine rank and the tensor', async () => {
    const run = await launchFixture(4, 'test/fixtures/sync/server-gather-faults.mjs', ['corrupt'], {}, 110_000);
    expect(run.code, run.stderr).toBe(0);
    const rs = run.results as unknown as Result[];
    expect(rs.map((r) => r.rank).sort()).toEqual([0, 1, 2, 3]);
    for (const r of rs) {
      const tag = `rank ${r.rank}`;
      // The whole model went as one gathered round.
      expect(r.gathers, tag).toBe(1);
      expect(r.broadcasts, tag).toBe(0);
      expect(r.clean.ok, `${tag}: ${r.clean.message}`).toBe(true);
      expect(r.clean.verified!.checksums, tag).toBe(true);
      expect(r.faulty.ok, `${tag}: not caught`).toBe(false);
      expect(r.faulty.code, tag).toBe('ASCENT_WEIGHT_SYNC');
      const d = r.faulty.details!;
      expect(d.engineRank, tag).toBe(3);
      expect(typeof d.tensor, tag).toBe('string');
      expect(r.faulty.message, tag).toContain(d.tensor);
      expect(r.faulty.message, tag).toContain('engine rank 3 ');
      expect(d.engineFingerprint, tag).not.toBe(d.trainerFingerprint);
      // Only the corrupted rank differs.
      expect(d.failures.length, tag).toBe(1);
      expect(r.after!.ok, `${tag}: the clean sync after: ${r.after!.message}`).toBe(true);
    }
    // Every rank names the same tensor.
    expect(new Set(rs.map((r) => r.faulty.details!.tensor)).size).toBe(1);
  }, 120_000);

  it('an engine rank that fails inside the sync makes every other rank fail at once, naming it', async () => {
    const run = await launchFixture(4, 'test/fixtures/sync/server-gather-faults.mjs', ['die'], {}, 110_000);
    expect(run.code, run.stderr).toBe(0);
    const rs = run.results as unknown as Result[];
    expect(rs.map((r) => r.rank).sort()).toEqual([0, 1, 2, 3]);
    for (const r of rs) {
      const tag = `rank ${r.rank}`;
      expect(r.clean.ok, `${tag}: ${r.clean.message}`).toBe(true);
      expect(r.faulty.ok, tag).toBe(false);
      if (r.rank === 3) {
        expect(r.faulty.message, tag).toContain('injected failure');
        continue;
      }
      expect(r.faulty.code, tag).toBe('ASCENT_COMM_ABORTED');
      expect(r.faulty.details!.culpritWorldRanks, tag).toEqual([3]);
      expect(r.faulty.message, tag).toContain('rank 3 failed inside the sync before its transfers were issued');
      expect(r.faulty.message, tag).toContain('injected failure');
    }
  }, 120_000);
});
