/**
 * Colocated weight sync on real worker ranks (test/fixtures/sync/colocate.mjs): fsdp2
 * dp2 → engine tp 1 / tp 2, megatron tp2 → engine tp 2 / tp 1, a bucket smaller than one
 * tensor, tiny-dense and tiny-moe. After one training step and a sync, the engine's
 * runtime checksums equal those of an engine fully reloaded from gatherState('params'),
 * its log-probs equal that engine's and the trainer's (verify) within 1e-4, post-load
 * processing never ran, and the extra device memory stays within 2 buckets when every
 * tensor fits a bucket; the verification's fingerprints match. A layout bug (layer 0's
 * expert w2 written transposed) is caught by the fingerprint comparison with a
 * WeightSyncError naming the tensor and every engine rank.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';

interface CaseResult {
  strategy: string;
  engineTp: number;
  bucketBytes: number;
  bug?: boolean;
  report: {
    mode: string;
    kind: string;
    bytes: number;
    peakExtraBytes: number;
    tensors: number;
    verified?: { checksums: boolean; maxLogprobDiff: number };
  } | null;
  error: { code: string; message: string } | null;
  got: Record<string, string>;
  want: Record<string, string>;
  maxDiff: number;
  processCalls: number;
  largest: number;
}

const runs: Record<string, LaunchRun> = {};
beforeAll(async () => {
  ensureParallelBuilt();
  for (const which of ['dense', 'moe']) runs[which] = await launchFixture(2, 'test/fixtures/sync/colocate.mjs', [which]);
}, 120_000);

describe('colocated sync on 2 ranks', () => {
  it.each(['dense', 'moe'] as const)('tiny %s, every case on every rank: checksums equal a full reload, log-probs agree, no post-load processing', (which) => {
    const run = runs[which]!;
    expect(run.code, run.stderr).toBe(0);
    expect(run.results.length).toBe(2);
    const seen = new Set<string>();
    for (const r of run.results) {
      for (const c of r.results as CaseResult[]) {
        if (c.bug) continue;
        const tag = `${which} ${c.strategy}→tp${c.engineTp} bucket ${c.bucketBytes} rank ${r.rank}`;
        seen.add(`${c.strategy}${(c as CaseResult & { ep?: number }).ep ? `-ep${(c as CaseResult & { ep?: number }).ep}` : ''}:${c.engineTp}:${c.bucketBytes}`);
        expect(c.error, tag).toBeNull();
        expect(Object.keys(c.got).length, tag).toBeGreaterThan(0);
        expect(c.got, tag).toEqual(c.want);
        expect(c.maxDiff, tag).toBeLessThan(1e-4);
        expect(c.report!.verified!.checksums, tag).toBe(true);
        expect(c.report!.verified!.fingerprints, tag).toBe(2 * (c as CaseResult & { hfTensors: number }).hfTensors);
        expect(c.report!.verified!.maxLogprobDiff, tag).toBeLessThan(1e-4);
        expect(c.processCalls, tag).toBe(0);
        expect(c.report!.mode).toBe('colocate');
        expect(c.report!.kind).toBe('full');
        expect(c.report!.bytes).toBeGreaterThan(0);
        if (c.bucketBytes >= 2 * c.largest) expect(c.report!.peakExtraBytes, tag).toBeLessThanOrEqual(2 * c.bucketBytes);
        if (c.bucketBytes < c.largest) expect(c.bucketBytes).toBe(4096); // the small-bucket case ran
        if (c.strategy === 'fsdp2' && c.bucketBytes >= 2 * c.largest) {
          // Adjacent chunks of a unit's flat shard share one all-gather (colocate-sources.ts gatherRun),
          // so a sync where every tensor fits a bucket issues fewer all-gathers than it has tensors; to
          // an engine of TP 1 (every write one contiguous slice) of the dense model, one per unit.
          const g = c as CaseResult & { gathers: number; sources: number; units: number };
          expect(g.gathers, tag).toBeLessThan(g.sources);
          if (which === 'dense' && c.engineTp === 1) expect(g.gathers, tag).toBe(g.units);
        }
      }
    }
    const cases = ['fsdp2:1:4194304', 'fsdp2:2:1048576', 'fsdp2:2:4096', 'megatron:2:1048576', 'megatron:1:1048576'];
    if (which === 'moe') cases.push('megatron-ep2:2:1048576', 'megatron-ep2:1:1048576');
    expect(seen).toEqual(new Set(cases));
  });

  it('tiny moe: a transposed expert weight is caught by the fingerprint comparison (WeightSyncError on every rank naming the tensor and both engine ranks)', () => {
    const run = runs.moe!;
    expect(run.code, run.stderr).toBe(0);
    let n = 0;
    for (const r of run.results) {
      for (const c of r.results as CaseResult[]) {
        if (!c.bug) continue;
        n++;
        expect(c.error?.code).toBe('ASCENT_WEIGHT_SYNC');
        expect(c.error?.message).toMatch(
          /engine rank 0 \(tp rank \d\) holds model\.layers\.0\.mlp\.experts\.down_proj with fingerprint [0-9a-f]{16} but the trainer's is [0-9a-f]{16}/,
        );
        expect(c.error?.message).toMatch(/engine rank 1 \(tp rank \d\) holds model\.layers\.0\.mlp\.experts\.down_proj/);
        // Independent confirmation: the bytes differ from a full reload exactly in that tensor.
        const bad = Object.keys(c.want).filter((k) => c.got[k] !== c.want[k]);
        expect(bad).toEqual(['model.layers.0.mlp.experts.w2_weight']);
        expect(c.maxDiff).toBeGreaterThan(1e-4);
      }
    }
    expect(n).toBe(4);
  });
});
