/**
 * fsdp2 bf16 mixed precision on real worker ranks (test/fixtures/train/fsdp2-bf16-cases.mjs
 * under launch), tiny-dense and tiny-moe:
 * - against fsdp2 bf16's own reference, SingleDeviceStrategy bf16 on rank 0: the same roundings
 *   (a cast of a shard is the shard of the cast), so loss and every gathered gradient agree to
 *   fp32 summation order, 1e-5 relative per tensor as the fp32 fsdp2 tests (measured 3.4e-7);
 * - against fsdp2 fp32: loss within 2e-3 relative; gradients, dense within 5e-2 per tensor,
 *   both within 5e-2 relative L2 (bf16 rounding, and on MoE the router flips it causes: the
 *   bounds are argued in train-bf16-single.test.ts; measured 1.2e-2 / 6e-3 dense, L2 1.3e-2 moe);
 * - the all-gathers of one forward + backward move half the bytes: the ratio to fp32 is what the
 *   layout predicts (bf16 part 2 bytes, norms and router 4) and below 0.51, and the parameters
 *   gathered as bf16 are exactly the matmul weights;
 * - after steps every shard (params, grads, AdamW moments) and every weight source is fp32, and
 *   gatherState('params') returns fp32 masters that are not bf16-rounded;
 * - 20 steps on fresh batches: the held-out loss falls like fp32's, within the drift of the
 *   single-device test (0.02 dense, 0.1 moe).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';

beforeAll(() => ensureParallelBuilt(), 120_000);

const FIXTURE = 'test/fixtures/train/fsdp2-bf16-cases.mjs';

function checkEquiv(run: LaunchRun, nproc: number, which: 'dense' | 'moe'): void {
  expect(run.stderr).toBe('');
  expect(run.code).toBe(0);
  expect(run.results.length).toBe(nproc);
  for (const r of run.results) {
    const x = r[`equiv:${which}`] as Record<string, any>;
    const at = `rank ${r.rank} ${which}`;
    expect(x.lowParams, at).toEqual(x.wantLow);
    expect(x.ratio, at).toBeLessThan(0.51);
    expect(Math.abs(x.ratio - x.predictedRatio), at).toBeLessThan(1e-3);
    expect(x.loss.tokens[0]).toBe(x.loss.tokens[1]);
    expect(x.loss.rel, at).toBeLessThan(2e-3);
    expect(x.vsFp32.problems, at).toEqual([]);
    expect(x.vsFp32.l2, at).toBeLessThan(5e-2);
    expect(x.vsFp32.l2, `${at}: bf16 must differ from fp32 at all`).toBeGreaterThan(0);
    if (which === 'dense') expect(x.vsFp32.worst, `${at} ${x.vsFp32.worstName}`).toBeLessThan(5e-2);
    expect(x.shardDtypes, at).toEqual(['fp32']);
    expect(x.sourceDtypes, at).toEqual(['fp32']);
    expect(x.stateIsFloat32, at).toBe(true);
    expect(x.masterHasLowBits, at).toBe(true);
  }
  const ref = (run.results[0]![`equiv:${which}`] as Record<string, any>).vsSingle;
  expect(ref.lossRel).toBeLessThan(1e-5);
  expect(ref.grads.problems).toEqual([]);
  expect(ref.grads.worst, ref.grads.worstName).toBeLessThan(1e-5);
}

describe('fsdp2 bf16 mixed precision (real ranks)', () => {
  it('4 ranks: equivalence, half-byte gathers, fp32 state; 20 steps track fp32', async () => {
    const run = await launchFixture(4, FIXTURE, ['equiv:dense,equiv:moe,curve:dense,curve:moe'], {}, 110_000);
    checkEquiv(run, 4, 'dense');
    checkEquiv(run, 4, 'moe');
    for (const which of ['dense', 'moe'] as const) {
      const c = run.results[0]![`curve:${which}`] as Record<string, { first: number; eval: number }>;
      for (const d of ['float32', 'bfloat16']) expect(c[d]!.eval, `${which} ${d}`).toBeLessThan(0.75 * c[d]!.first);
      expect(Math.abs(c.bfloat16!.eval - c.float32!.eval), which).toBeLessThan(which === 'dense' ? 0.02 : 0.1);
    }
  }, 120_000);

  it('2 ranks: equivalence and half-byte gathers', async () => {
    const run = await launchFixture(2, FIXTURE, ['equiv:dense,equiv:moe']);
    checkEquiv(run, 2, 'dense');
    checkEquiv(run, 2, 'moe');
  }, 60_000);
});
