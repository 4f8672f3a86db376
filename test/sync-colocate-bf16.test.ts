/**
 * Colocated weight sync into a 'bfloat16' engine on real worker ranks
 * (test/fixtures/sync/colocate.mjs with bfloat16): the trainer's fp32 matmul weights are
 * cast to bf16 before the all-gathers, so the sync moves half their bytes; the engine's
 * bytes equal a bf16 engine fully reloaded from gatherState('params') (the bf16 cast of the
 * trainer's weights) on every strategy → engine tp case; the fingerprint check compares
 * bf16 against bf16 exactly, so a transposed expert weight (moe) and one changed bf16
 * weight ('flip') are still caught, naming the tensor.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';

interface CaseResult {
  strategy: string;
  engineTp: number;
  bucketBytes: number;
  bug?: boolean | 'flip';
  dtype: string;
  report: { bytes: number; dtype?: string; verified?: { checksums: boolean; fingerprints: number; maxLogprobDiff: number } } | null;
  error: { code: string; message: string } | null;
  got: Record<string, string>;
  want: Record<string, string>;
  maxDiff: number;
  processCalls: number;
  hfTensors: number;
  fp32Bytes: number;
  fp32Held: number;
}

const runs: Record<string, LaunchRun> = {};
beforeAll(async () => {
  ensureParallelBuilt();
  for (const which of ['dense', 'moe']) runs[which] = await launchFixture(2, 'test/fixtures/sync/colocate.mjs', [which, 'bfloat16']);
}, 240_000);

const cases = (which: string) => runs[which]!.results.flatMap((r) => (r.results as CaseResult[]).map((c) => ({ ...c, rank: r.rank as number })));

describe('colocated sync into a bfloat16 engine on 2 ranks', () => {
  it.each(['dense', 'moe'] as const)('tiny %s: bf16 bytes equal a bf16 full reload on every case, half the bytes moved, fingerprints match', (which) => {
    const run = runs[which]!;
    expect(run.code, run.stderr).toBe(0);
    let n = 0;
    for (const c of cases(which)) {
      if (c.bug) continue;
      n++;
      const tag = `${which} ${c.strategy}→tp${c.engineTp} bucket ${c.bucketBytes} rank ${c.rank}`;
      expect(c.dtype).toBe('bfloat16');
      expect(c.error, tag).toBeNull();
      expect(Object.keys(c.got).length, tag).toBeGreaterThan(0);
      expect(c.got, tag).toEqual(c.want);
      expect(c.maxDiff, tag).toBeLessThan(1e-4); // the same bf16 weights as the reference engine
      expect(c.report!.verified!.checksums, tag).toBe(true);
      expect(c.report!.verified!.fingerprints, tag).toBe(2 * c.hfTensors);
      expect(c.report!.verified!.maxLogprobDiff, tag).toBeLessThan(0.1); // fp32 trainer vs bf16 engine
      expect(c.processCalls, tag).toBe(0);
      expect(c.report!.dtype).toBe('bfloat16');
      // bf16 for the matmul weights, fp32 for the norms and router: about half of fp32.
      expect(c.report!.bytes, tag).toBe((c.fp32Bytes - c.fp32Held) / 2 + c.fp32Held);
      expect(c.report!.bytes, tag).toBeLessThan(0.51 * c.fp32Bytes);
    }
    expect(n).toBe(which === 'moe' ? 14 : 10);
  });

  it('a transposed expert weight (moe) and one changed bf16 weight are caught by the fingerprint comparison, naming the tensor', () => {
    let layout = 0,
      flip = 0;
    for (const which of ['dense', 'moe']) {
      for (const c of cases(which)) {
        if (!c.bug) continue;
        expect(c.error?.code).toBe('ASCENT_WEIGHT_SYNC');
        const bad = Object.keys(c.want).filter((k) => c.got[k] !== c.want[k]);
        if (c.bug === 'flip') {
          flip++;
          expect(c.error?.message).toMatch(/holds model\.layers\.1\.self_attn\.o_proj\.weight with fingerprint [0-9a-f]{16} but the trainer's is [0-9a-f]{16}/);
          expect(bad).toEqual(['model.layers.1.self_attn.o_proj.weight']);
        } else {
          layout++;
          expect(c.error?.message).toMatch(/holds model\.layers\.0\.mlp\.experts\.down_proj with fingerprint [0-9a-f]{16} but the trainer's is/);
          expect(bad).toEqual(['model.layers.0.mlp.experts.w2_weight']);
        }
      }
    }
    expect(flip).toBe(4); // dense and moe, 2 ranks each
    expect(layout).toBe(4);
  });
});
