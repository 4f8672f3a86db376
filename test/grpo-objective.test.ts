/**
 * The GRPO objective's variants against an independent brute-force fp64 computation
 * written the way TRL writes it (padded [rows, seqLen] matrices, per-token loss, then
 * the loss type's aggregation), and its exact gradient against central differences; the
 * rollout correction's weights; the learning-rate schedules.
 */
import { describe, expect, it } from 'vitest';
import { grpoObjective, KL_ESTIMATORS, LOSS_TYPES, type ObjectiveInput, type ObjectiveOptions } from '../src/grpo/objective.js';
import { rolloutCorrection } from '../src/grpo/rollout-correction.js';
import { checkLrSchedule, lrAt } from '../src/train/lr-schedule.js';

/** A hand-made batch: 4 rows of 6 positions, ragged response masks, ratios inside and outside the clip range. */
function batch(): ObjectiveInput {
  const rows = 4,
    seqLen = 6;
  const mask = [0, 1, 1, 1, 1, 0, /**/ 0, 0, 1, 1, 0, 0, /**/ 0, 1, 1, 1, 1, 1, /**/ 0, 0, 0, 1, 0, 0];
  const logp: number[] = [],
    oldLogp: number[] = [],
    refLogp: number[] = [];
  // Deterministic spread of log-ratios in [-0.5, 0.5] that never sits on a clip boundary (0.2 / 0.28).
  const ratios = [0, 0.31, -0.05, 0.12, -0.41, 0, 0, 0, 0.47, -0.13, 0, 0, 0, 0.02, -0.33, 0.25, 0.09, -0.17, 0, 0, 0, 0.36, 0, 0];
  for (let i = 0; i < rows * seqLen; i++) {
    const old = -1.1 - 0.07 * i;
    oldLogp.push(old);
    logp.push(old + ratios[i]!);
    refLogp.push(old + 0.11 * Math.sin(i));
  }
  return { rows, seqLen, mask, logp, oldLogp, refLogp, advantages: [1.3, -0.7, -1.1, 0.4], globalRows: rows, globalTokens: mask.filter(Boolean).length };
}

const base: ObjectiveOptions = {
  lossType: 'dapo',
  epsilon: 0.2,
  epsilonHigh: 0.28,
  delta: null,
  importanceSamplingLevel: 'token',
  beta: 0.04,
  klEstimator: 'k3',
  maxCompletionLength: 8,
};

/** TRL-style: coef matrices, per-token loss, masked aggregation. */
function brute(inp: ObjectiveInput, o: ObjectiveOptions, isW?: number[]): number {
  const R = inp.rows,
    S = inp.seqLen;
  const m = (r: number, t: number) => (inp.mask[r * S + t] ? 1 : 0);
  const ptl: number[][] = [];
  for (let r = 0; r < R; r++) {
    let lr = 0,
      cnt = 0;
    for (let t = 0; t < S; t++) {
      lr += m(r, t) * (inp.logp[r * S + t]! - inp.oldLogp[r * S + t]!);
      cnt += m(r, t);
    }
    const row: number[] = [];
    for (let t = 0; t < S; t++) {
      const i = r * S + t;
      const coef1 = o.importanceSamplingLevel === 'sequence' ? Math.exp(lr / Math.max(1, cnt)) : Math.exp(inp.logp[i]! - inp.oldLogp[i]!);
      const coef2 = Math.min(Math.max(coef1, 1 - o.epsilon), 1 + o.epsilonHigh);
      const c1 = o.delta === null ? coef1 : Math.min(coef1, o.delta);
      const A = inp.advantages[r]!;
      let l = -Math.min(c1 * A, coef2 * A) * (isW ? isW[i]! : 1);
      const x = inp.refLogp![i]! - inp.logp[i]!;
      const kl = o.klEstimator === 'k1' ? -x : o.klEstimator === 'k2' ? 0.5 * x * x : Math.exp(x) - x - 1;
      if (o.beta) l += o.beta * kl;
      row.push(l);
    }
    ptl.push(row);
  }
  let total = 0,
    tokens = 0;
  const perSeq: number[] = [];
  for (let r = 0; r < R; r++) {
    let s = 0,
      c = 0;
    for (let t = 0; t < S; t++) {
      s += ptl[r]![t]! * m(r, t);
      c += m(r, t);
    }
    total += s;
    tokens += c;
    perSeq.push(s / Math.max(1, c));
  }
  if (o.lossType === 'grpo') return perSeq.reduce((a, b) => a + b, 0) / R;
  if (o.lossType === 'bnpo') return total / Math.max(1, tokens);
  if (o.lossType === 'dr_grpo') return total / (R * o.maxCompletionLength);
  return total / tokens;
}

const variants: ObjectiveOptions[] = [];
for (const lossType of LOSS_TYPES) {
  for (const importanceSamplingLevel of ['token', 'sequence'] as const) {
    for (const klEstimator of KL_ESTIMATORS) variants.push({ ...base, lossType, importanceSamplingLevel, klEstimator });
    variants.push({ ...base, lossType, importanceSamplingLevel, beta: 0, delta: 1.4 });
  }
}
const name = (o: ObjectiveOptions) => `${o.lossType} ${o.importanceSamplingLevel} beta=${o.beta} ${o.klEstimator} delta=${o.delta}`;

describe('GRPO objective', () => {
  it.each(variants.map((o) => [name(o), o] as const))('%s equals the brute-force fp64 value and its gradient the central differences', (_, o) => {
    const inp = batch();
    const isW = Array.from({ length: 24 }, (_, i) => 0.6 + 0.05 * (i % 7));
    for (const w of [undefined, isW]) {
      const res = grpoObjective({ ...inp, ...(w ? { isWeights: w } : {}) }, o);
      const want = brute(inp, o, w);
      expect(Math.abs(res.value - want)).toBeLessThan(1e-12 * Math.max(1, Math.abs(want)));
      const h = 1e-6;
      for (let i = 0; i < 24; i++) {
        const at = (d: number) => {
          const logp = [...(inp.logp as number[])];
          logp[i]! += d;
          return brute({ ...inp, logp }, o, w);
        };
        const fd = (at(h) - at(-h)) / (2 * h);
        expect(Math.abs(res.weights[i]! - fd)).toBeLessThan(1e-7);
      }
    }
  });

  it('the clipped surrogate clips: ratios outside [1 − ε, 1 + ε_high] on the wrong side count and carry no surrogate gradient', () => {
    const inp = batch();
    const res = grpoObjective(inp, { ...base, beta: 0 });
    // A > 0: log-ratios 0.31 (row 0) and 0.36 (row 3) → ratios 1.36, 1.43 > 1.28 clipped high; A < 0: −0.33 (row 2) → 0.72 < 0.8 clipped low.
    // Ratios beyond the range on the other side (0.47 with A < 0, −0.41 with A > 0) keep the unclipped term.
    expect(res.stats.clippedHigh).toBe(2);
    expect(res.stats.clippedLow).toBe(1);
    expect(res.stats.clipped).toBe(3);
    expect([res.weights[1], res.weights[21], res.weights[14]]).toEqual([0, 0, 0]);
    expect(res.weights[8]).not.toBe(0);
    expect(res.weights[4]).not.toBe(0);
    expect(res.stats.tokens).toBe(inp.globalTokens);
  });

  it('at ratio 1 every variant is clip-free and a data-parallel split sums to the whole (grpo, dr_grpo, dapo)', () => {
    const inp = batch();
    for (const lossType of ['grpo', 'dr_grpo', 'dapo'] as const) {
      const o = { ...base, lossType };
      const whole = grpoObjective(inp, o);
      const half = (r0: number): ObjectiveInput => {
        const sl = <T>(a: ArrayLike<T>) => Array.from(a).slice(r0 * 6, (r0 + 2) * 6);
        return {
          ...inp,
          rows: 2,
          mask: sl(inp.mask),
          logp: sl(inp.logp),
          oldLogp: sl(inp.oldLogp),
          refLogp: sl(inp.refLogp!),
          advantages: Array.from(inp.advantages).slice(r0, r0 + 2),
        };
      };
      const a = grpoObjective(half(0), o),
        b = grpoObjective(half(2), o);
      expect(a.value + b.value).toBeCloseTo(whole.value, 12);
      expect([...a.weights, ...b.weights].map((x) => x.toFixed(12))).toEqual([...whole.weights].map((x) => x.toFixed(12)));
      const same = grpoObjective({ ...inp, logp: inp.oldLogp }, { ...o, beta: 0 });
      expect(same.stats.clipped).toBe(0);
      expect(same.stats.ratio).toBe(inp.globalTokens);
    }
  });

  it('refuses bad options and mismatched inputs', () => {
    const inp = batch();
    expect(() => grpoObjective(inp, { ...base, lossType: 'mean' as never })).toThrow(/lossType must be one of grpo, bnpo, dr_grpo, dapo but is "mean"/);
    expect(() => grpoObjective(inp, { ...base, delta: 1.1 })).toThrow(/delta must be null or greater than 1 \+ epsilonHigh/);
    expect(() => grpoObjective({ ...inp, advantages: [1] }, base)).toThrow(/advantages has 1 entries; expected one per row \(4\)/);
    expect(() => grpoObjective({ ...inp, refLogp: undefined }, base)).toThrow(/beta = 0.04 needs refLogp/);
  });
});

describe('rollout correction', () => {
  const rows = 2,
    seqLen = 4;
  const mask = [1, 1, 1, 0, 0, 1, 1, 1];
  const old = [-1, -2, -0.5, 0, 0, -1.5, -0.7, -0.2];

  it('weights are exactly 1 when engine and trainer agree, in every mode', () => {
    for (const mode of ['token_truncate', 'token_mask', 'sequence_truncate', 'sequence_mask'] as const) {
      const { weights, metrics } = rolloutCorrection({ rows, seqLen, mask, oldLogp: old, engineLogp: old }, mode, 2);
      expect([...weights]).toEqual(mask.map((m) => (m ? 1 : 0)));
      expect(metrics).toMatchObject({ tokens: 6, meanAbsDiff: 0, maxAbsDiff: 0, k3Kl: 0, meanWeight: 1, correctedFraction: 0 });
    }
  });

  it('a perturbed engine: token weights are exp(old − engine), capped or masked above the cap; sequence weights use the product', () => {
    const engine = [...old];
    engine[0] = old[0]! - 1; // ρ = e ≈ 2.718 > 2
    engine[1] = old[1]! + 0.5; // ρ = e^−0.5
    engine[6] = old[6]! - 0.3; // ρ = e^0.3
    const inp = { rows, seqLen, mask, oldLogp: old, engineLogp: engine };
    const t = rolloutCorrection(inp, 'token_truncate', 2).weights;
    expect(t[0]).toBe(2);
    expect(t[1]).toBeCloseTo(Math.exp(-0.5), 14);
    expect(t[6]).toBeCloseTo(Math.exp(0.3), 14);
    const m = rolloutCorrection(inp, 'token_mask', 2);
    expect(m.weights[0]).toBe(0);
    expect(m.weights[6]).toBeCloseTo(Math.exp(0.3), 14);
    expect(m.metrics.correctedFraction).toBeCloseTo(1 / 6, 14);
    const s = rolloutCorrection(inp, 'sequence_truncate', 2).weights;
    expect([s[0], s[1], s[2]]).toEqual([Math.min(2, Math.exp(0.5)), Math.min(2, Math.exp(0.5)), Math.min(2, Math.exp(0.5))]);
    expect(s[5]).toBeCloseTo(Math.exp(0.3), 14);
    const sm = rolloutCorrection({ ...inp, engineLogp: engine.map((x, i) => (i === 2 ? x - 1 : x)) }, 'sequence_mask', 2).weights;
    expect([sm[0], sm[1], sm[2]]).toEqual([0, 0, 0]); // ρ_seq = e^1.5 > 2
    expect(() => rolloutCorrection(inp, 'token_truncate', 0.5)).toThrow(/cap must be at least 1/);
  });
});

describe('learning-rate schedules', () => {
  it('warm-up, then constant / linear / cosine as transformers computes them', () => {
    const s = { lr: 1e-3, warmupSteps: 4, totalSteps: 12 };
    expect([0, 1, 2, 3].map((k) => lrAt({ ...s, kind: 'linear' }, k))).toEqual([0, 2.5e-4, 5e-4, 7.5e-4]);
    expect(lrAt({ ...s, kind: 'constant' }, 9)).toBe(1e-3);
    expect(lrAt({ ...s, kind: 'linear' }, 4)).toBe(1e-3);
    expect(lrAt({ ...s, kind: 'linear' }, 8)).toBeCloseTo(5e-4, 15);
    expect(lrAt({ ...s, kind: 'linear' }, 12)).toBe(0);
    expect(lrAt({ ...s, kind: 'cosine' }, 8)).toBeCloseTo(5e-4, 15);
    expect(lrAt({ ...s, kind: 'cosine', minLr: 1e-4 }, 12)).toBeCloseTo(1e-4, 15);
    expect(lrAt({ ...s, kind: 'cosine' }, 6)).toBeCloseTo(1e-3 * 0.5 * (1 + Math.cos(Math.PI / 4)), 15);
    expect(() => checkLrSchedule({ ...s, kind: 'cosine', warmupSteps: 12 })).toThrow(/warmupSteps \(12\) must be below totalSteps/);
    expect(() => checkLrSchedule({ ...s, kind: 'step' as never })).toThrow(/kind must be one of constant, linear, cosine/);
  });
});
