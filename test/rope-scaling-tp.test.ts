/**
 * Scaled rope on the parallel paths (test/fixtures/train/rope-scaling-tp.mjs under launch, 2 ranks):
 * the megatron strategy at tp 2, the rollout engine at tp 2 and fsdp2 at dp 2 give the single strategy's
 * token log-probs for tiny Qwen3 and Qwen3.5 (partial rotary) models with yarn rope, and those
 * differ from the default rope's, so a tp path that dropped the table would fail here.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { loadModelConfig, toHFConfig } from '../src/model/config.js';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';
import { TEXT } from './helpers/qwen35-configs.js';

const FIXTURE = 'test/fixtures/train/rope-scaling-tp.mjs';
const YARN = { rope_type: 'yarn', factor: 4, original_max_position_embeddings: 16 };

const qwen3 = (() => {
  const hf = toHFConfig(loadModelConfig(new URL('../examples/models/tiny-dense/config.json', import.meta.url).pathname));
  delete hf.rope_scaling;
  return { ...hf, rope_parameters: { ...(hf.rope_parameters as object), ...YARN } };
})();
const qwen35 = { ...TEXT, rope_parameters: { ...TEXT.rope_parameters, ...YARN } };

/** Largest difference over the rows `a` has (a rank's share under data parallelism; null elsewhere). */
const maxDiff = (a: Array<number[] | null>, b: number[][]) => Math.max(...a.flatMap((row, i) => (row ?? []).map((v, t) => Math.abs(v - b[i]![t]!))));

beforeAll(() => ensureParallelBuilt(), 300_000);

describe.each([
  ['qwen3 yarn', qwen3],
  ['qwen3.5 yarn (partial rotary)', qwen35],
] as const)('%s at tp 2', (_name, hf) => {
  it('megatron, the engine and fsdp2 equal the single strategy within 1e-4; the default rope differs', async () => {
    const run = await launchFixture(2, FIXTURE, [JSON.stringify(hf)], {}, 120_000);
    expect(run.code, run.stderr).toBe(0);
    expect(run.results.map((r) => r.rank)).toEqual([0, 1]);
    const r0 = run.results[0] as unknown as Record<string, number[][]>;
    const single = r0.single!;
    expect(single.flat().length).toBe(11 + 6 + 9 + 7);
    for (const r of run.results as unknown as Array<Record<string, number[][]>>) {
      expect(maxDiff(r.megatron!, single)).toBeLessThan(1e-4);
      expect(maxDiff(r.engine!, single)).toBeLessThan(1e-4);
      expect(maxDiff(r.fsdp2!, single)).toBeLessThan(1e-4);
    }
    // fsdp2's two ranks together scored every row.
    const fsdp2Rows = (run.results as unknown as Array<Record<string, Array<number[] | null>>>).flatMap((r) => r.fsdp2!.filter((row) => row !== null));
    expect(fsdp2Rows.length).toBe(4);
    expect(maxDiff(r0.plain!, single)).toBeGreaterThan(1e-3);
  }, 180_000);
});
