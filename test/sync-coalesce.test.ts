/**
 * Server-mode sync with small segments packed into one broadcast per bucket (ServerSync
 * coalesceBytes; test/fixtures/sync/server-coalesce.mjs, fsdp2 dp2 → an engine of tp 2,
 * one bucket per trainer rank): packing everything, nothing, the default and a mid
 * threshold give bit-identical engine weights, each verified by fingerprints after the
 * engine was overwritten with other weights; the collectives per sync are exactly what the
 * threshold plans: when every piece of every trainer rank is at most it, the whole bucket
 * round is one allToAllV over all ranks and nothing is broadcast (a gathered round); else
 * each trainer rank roots one broadcast per piece above it, plus one for the packed ones
 * when at least two are at most it. An invalid threshold is refused with a hint.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';
import { loadModelConfig } from '../src/model/config.js';
import { paramSpecs } from '../src/model/params.js';

beforeAll(() => ensureParallelBuilt());

const TENSORS = paramSpecs(loadModelConfig('examples/models/tiny-dense/config.json'), { expertLayout: 'fused' }).length;

/** Every trainer rank's non-empty pieces are at most `t`: the round is gathered. */
const gathered = (trainers: Array<{ pieces: number[] }>, t: number) => trainers.every((x) => x.pieces.every((b) => b <= t));

/** Broadcasts a trainer rank roots for pieces of `pieces` bytes, all in one bucket, at threshold `t` (the round not gathered). */
const planned = (pieces: number[], t: number) => {
  const nonEmpty = pieces.filter((b) => b > 0);
  const small = nonEmpty.filter((b) => b <= t).length;
  return nonEmpty.length - small + (small >= 2 ? 1 : small);
};

describe('server-mode sync packs small segments', () => {
  it('every threshold gives the same verified engine weights with the planned broadcast count', async () => {
    const run = await launchFixture(4, 'test/fixtures/sync/server-coalesce.mjs', [], {}, 110_000);
    expect(run.code, run.stderr).toBe(0);
    const rs = run.results as Array<Record<string, any>>;
    expect(rs.map((r) => r.rank)).toEqual([0, 1, 2, 3]);
    const trainers = rs.filter((r) => r.trainer);
    const modes = ['all', 'none', 'default', 'mid'];
    for (const r of rs) {
      expect(r.invalid?.name, `rank ${r.rank}`).toBe('InvalidArgumentError');
      expect(r.invalid.message).toContain('coalesceBytes must be a non-negative integer but is -1');
      expect(r.invalid.message).toContain('HINT');
      expect(r.modes.default.coalesceBytes).toBe(1 << 20);
      for (const m of modes) {
        const x = r.modes[m];
        expect(x.error, `rank ${r.rank} ${m}`).toBeNull();
        expect(x.verified.checksums).toBe(true);
        expect(x.verified.fingerprints).toBe(2 * TENSORS);
      }
    }
    // The tiny model's pieces (at most 1 MiB each) are all small at the default and 'all'
    // thresholds, and on both sides of the mid one, so the modes differ.
    for (const m of ['all', 'default']) expect(gathered(trainers, rs[0]!.modes[m].coalesceBytes), m).toBe(true);
    for (const m of ['none', 'mid']) expect(gathered(trainers, rs[0]!.modes[m].coalesceBytes), m).toBe(false);
    for (const t of trainers) {
      expect(t.pieces.some((b: number) => b > 8192) && t.pieces.filter((b: number) => b > 0 && b <= 8192).length >= 2).toBe(true);
      for (const m of modes) {
        const g = gathered(trainers, t.modes[m].coalesceBytes);
        expect(t.modes[m].gathers, `trainer rank ${t.rank} ${m}`).toBe(g ? 1 : 0);
        expect(t.modes[m].broadcasts, `trainer rank ${t.rank} ${m}`).toBe(g ? 0 : planned(t.pieces, t.modes[m].coalesceBytes));
      }
      expect(t.modes.none.broadcasts).toBeGreaterThan(t.modes.mid.broadcasts);
      expect(t.modes.mid.broadcasts).toBeGreaterThan(1);
    }
    for (const e of rs.filter((r) => !r.trainer)) {
      // An engine rank receives every trainer rank's broadcasts, or the one gathered round.
      for (const m of modes) {
        expect(e.modes[m].broadcasts, `engine rank ${e.rank} ${m}`).toBe(trainers.reduce((a, t) => a + t.modes[m].broadcasts, 0));
        expect(e.modes[m].gathers, `engine rank ${e.rank} ${m}`).toBe(trainers[0]!.modes[m].gathers);
      }
      expect(Object.keys(e.modes.all.checksums).length).toBeGreaterThan(0);
      for (const m of modes) expect(e.modes[m].checksums, `engine rank ${e.rank} ${m}`).toEqual(e.modes.none.checksums);
    }
  }, 120_000);
});
