/**
 * The router load-balancing loss (output_router_logits, router_aux_loss_coef):
 * - on hand-made router logits (3 layers, a padding mask) its value equals a brute-force fp64
 *   transcription of Transformers' load_balancing_loss_func (mask branch and no-mask branch),
 *   and its gradient wrt the logits agrees with central finite differences of that transcription;
 * - the tokens split over two "ranks" whose counts are summed (what the strategies all-reduce):
 *   the shares add up to the whole batch's aux and their gradients are the whole batch's;
 * - tiny qwen3_moe and qwen3_5_moe on the single-device strategy with the flag on: the loss is the
 *   flag-off loss + coef · aux, aux equals the transcription on the model's own router logits, and
 *   the router weight's gradient differs from the flag-off one by what finite differences of the
 *   flag-on loss say;
 * - GRPO micro-batches: each adds its own aux, weighted by its rows' share of the optimizer step;
 * - the one-device SupervisedTrainer adds it too.
 */
import { describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { Tensor } from '../src/runtime/device/device-index.js';
import { Tape, Var, type RouterTap } from '../src/model/autograd.js';
import * as K from '../src/model/kernels/index.js';
import { parseModelConfig, loadModelConfig, toHFConfig } from '../src/model/config.js';
import { grpoLoss } from '../src/grpo/loss.js';
import { SupervisedTrainer } from '../src/grpo/sft.js';
import { initialParams } from '../src/model/params.js';
import { uploadBatch } from '../src/model/qwen3.js';
import { routerAuxLoss, routerCounts } from '../src/model/router-aux-loss.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import type { TrainBatch } from '../src/train/strategy.js';
import { perturbedLoss, shiftedBatch } from './helpers/fd-loss.js';
import { MOE_TEXT } from './helpers/qwen35-configs.js';

/** Transformers' load_balancing_loss_func, written out in fp64: layers [T·E] each, mask [T] or none. */
function hfAux(layers: readonly ArrayLike<number>[], E: number, k: number, mask?: ArrayLike<number>): number {
  const tpe = new Float64Array(k * E); // Σ mask · one_hot(top-k)
  const rp = new Float64Array(E); // Σ mask · softmax
  let den = 0;
  for (const z of layers) {
    const T = z.length / E;
    for (let t = 0; t < T; t++) {
      const m = mask ? mask[t]! : 1;
      let mx = -Infinity;
      for (let e = 0; e < E; e++) mx = Math.max(mx, z[t * E + e]!);
      const p = Array.from({ length: E }, (_, e) => Math.exp(z[t * E + e]! - mx));
      const s = p.reduce((a, b) => a + b, 0);
      for (let e = 0; e < E; e++) p[e]! /= s;
      const order = Array.from({ length: E }, (_, e) => e).sort((a, b) => p[b]! - p[a]! || a - b);
      for (let j = 0; j < k; j++) tpe[j * E + order[j]!]! += m;
      for (let e = 0; e < E; e++) rp[e]! += m * p[e]!;
      den += m;
    }
  }
  let sum = 0;
  for (let j = 0; j < k; j++) for (let e = 0; e < E; e++) sum += (tpe[j * E + e]! / den) * (rp[e]! / den);
  return sum * E;
}

/** Pseudo-random logits in [-2, 2), seeded. */
function logitsOf(seed: number, n: number): Float32Array {
  const out = new Float32Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out[i] = (x / 2 ** 32) * 4 - 2;
  }
  return out;
}

const L = 3,
  T = 10,
  E = 6,
  k = 2;
// Two rows of 5 tokens, the second right-padded by 2.
const MASK = Int32Array.from([1, 1, 1, 1, 1, 1, 1, 1, 0, 0]);

/** Taps over leaf logits Vars (requiring grad) for rows [t0, t1) of each layer, routed by the router kernel. */
function tapsOf(dev: Device, host: Float32Array[], t0: number, t1: number): RouterTap[] {
  const stream = dev.defaultStream;
  return host.map((z) => {
    const logits = new Var(Tensor.fromArray(dev, z.subarray(t0 * E, t1 * E), [t1 - t0, E], { stream }), true);
    const r = K.routerTopK(logits.value, k, true, { stream });
    r.weights.release();
    return { logits, probs: r.probs, indices: r.indices };
  });
}

async function gradsOf(taps: RouterTap[], dev: Device): Promise<Float32Array[]> {
  return Promise.all(taps.map(async (t) => (await t.logits.grad!.toArray({ stream: dev.defaultStream })) as Float32Array));
}

describe('router aux loss on hand-made router logits', () => {
  const host = Array.from({ length: L }, (_, l) => logitsOf(17 + l, T * E));

  it.each([
    ['with a padding mask', MASK],
    ['without a mask', undefined],
  ] as const)('%s: value = the fp64 transcription of HF, gradient = its finite differences', async (_what, mask) => {
    const dev = Device.get(0);
    const tape = new Tape({ stream: dev.defaultStream });
    const taps = tapsOf(dev, host, 0, T);
    try {
      const { aux, value } = await routerAuxLoss(tape, taps, { numExperts: E, topK: k, ...(mask ? { mask } : {}) });
      const want = hfAux(host, E, k, mask);
      expect(Math.abs(value - want)).toBeLessThan(1e-6 * want);
      expect(((await aux.value.toArray()) as Float32Array)[0]).toBeCloseTo(want, 5);
      tape.backward(aux, tape.own(Tensor.fromArray(dev, Float32Array.of(1), [1])));
      const grads = await gradsOf(taps, dev);
      const h = 1e-4;
      let checked = 0;
      for (let l = 0; l < L; l++) {
        const z = Float64Array.from(host[l]!);
        for (let i = 0; i < T * E; i++) {
          const at = (d: number) => {
            const moved = Float64Array.from(z);
            moved[i]! += d;
            return hfAux(
              host.map((x, j) => (j === l ? moved : x)),
              E,
              k,
              mask,
            );
          };
          const fd = (at(h) - at(-h)) / (2 * h);
          expect(Math.abs(grads[l]![i]! - fd), `layer ${l} logit ${i}: backward ${grads[l]![i]} vs fd ${fd}`).toBeLessThan(1e-5);
          if (mask && !mask[Math.floor(i / E)]) expect(grads[l]![i]).toBe(0);
          if (Math.abs(fd) > 1e-3) checked++;
        }
      }
      expect(checked, 'the gradient is not all ~0').toBeGreaterThan(L * T);
    } finally {
      for (const t of taps) for (const x of [t.logits.value, t.logits.grad, t.probs, t.indices]) x?.release();
      tape.release();
    }
  });

  it('tokens split over two ranks with summed counts: the shares add up to the whole aux and its gradient', async () => {
    const dev = Device.get(0);
    const whole = { tape: new Tape({ stream: dev.defaultStream }), taps: tapsOf(dev, host, 0, T) };
    const split = [0, 1].map((r) => ({
      tape: new Tape({ stream: dev.defaultStream }),
      taps: tapsOf(dev, host, r * 5, r * 5 + 5),
      mask: MASK.subarray(r * 5, r * 5 + 5),
    }));
    try {
      // Each rank's local counts, summed as the strategies' all-reduce does.
      const local = await Promise.all(
        split.map(async (s) => routerCounts(await Promise.all(s.taps.map(async (t) => (await t.indices.toArray()) as Int32Array)), E, k, s.mask)),
      );
      const summed = local[0]!.map((c, i) => c + local[1]![i]!);
      expect(summed[k * E]).toBe(L * 8); // layers × non-padding tokens
      const sumCounts = async () => Float32Array.from(summed);
      const w = await routerAuxLoss(whole.tape, whole.taps, { numExperts: E, topK: k, mask: MASK });
      const shares = await Promise.all(split.map((s) => routerAuxLoss(s.tape, s.taps, { numExperts: E, topK: k, mask: s.mask, sumCounts })));
      expect(Math.abs(shares[0]!.value + shares[1]!.value - w.value)).toBeLessThan(1e-9);
      // A share alone is not the whole (both ranks hold tokens).
      expect(Math.abs(shares[0]!.value - w.value)).toBeGreaterThan(0.1 * w.value);
      const one = (tape: Tape) => tape.own(Tensor.fromArray(dev, Float32Array.of(1), [1]));
      whole.tape.backward(w.aux, one(whole.tape));
      split.forEach((s, r) => s.tape.backward(shares[r]!.aux, one(s.tape)));
      const gw = await gradsOf(whole.taps, dev);
      const gs = await Promise.all(split.map((s) => gradsOf(s.taps, dev)));
      for (let l = 0; l < L; l++) {
        const joined = Float32Array.from([...gs[0]![l]!, ...gs[1]![l]!]);
        for (let i = 0; i < joined.length; i++) expect(Math.abs(joined[i]! - gw[l]![i]!)).toBeLessThan(1e-7);
      }
    } finally {
      for (const s of [whole, ...split]) {
        for (const t of s.taps) for (const x of [t.logits.value, t.logits.grad, t.probs, t.indices]) x?.release();
        s.tape.release();
      }
    }
  });
});

/** A batch whose last row is right-padded (mask 0, no targets) over its last 3 positions. */
function paddedBatch(vocab: number): TrainBatch {
  const b = shiftedBatch(5, 3, 8, vocab);
  const mask = new Int32Array(3 * 8).fill(1);
  for (let s = 5; s < 8; s++) {
    mask[2 * 8 + s] = 0;
    b.inputIds[2 * 8 + s] = 0;
    b.targets[2 * 8 + s] = -100;
  }
  b.targets[2 * 8 + 4] = -100;
  return { ...b, attentionMask: mask };
}

// Large, so the aux term's share of the router gradient stands well above the finite-difference tolerance.
const COEF = 2;
const MODELS = {
  qwen3_moe: () => loadModelConfig(new URL('../examples/models/tiny-moe/config.json', import.meta.url).pathname),
  qwen3_5_moe: () => parseModelConfig({ ...MOE_TEXT, vocab_size: 64 }),
};

describe.each(Object.keys(MODELS) as Array<keyof typeof MODELS>)('%s with output_router_logits true (single device)', (which) => {
  it('loss = flag-off loss + coef · aux (aux = the HF transcription on its router logits); the router gradient moves as finite differences say', async () => {
    const off = MODELS[which]();
    const on = parseModelConfig({ ...toHFConfig(off), output_router_logits: true, router_aux_loss_coef: COEF });
    expect(on.moe!.routerAuxLossCoef).toBe(COEF);
    const dev = Device.get(0);
    const params = initialParams(off, 3);
    // Larger weights (as the Qwen3.5-MoE model test's): router logits well apart, so the finite
    // difference below moves no token across its top-k boundary, and gradients above fp32 noise.
    for (const [name, t] of params) if (/proj|embed|lm_head|experts|mlp\.gate\./.test(name)) for (let i = 0; i < t.data.length; i++) t.data[i]! *= 12;
    const data = paddedBatch(off.vocabSize);
    const sOff = SingleDeviceStrategy.create(off, dev, params);
    const sOn = SingleDeviceStrategy.create(on, dev, params);
    try {
      sOff.zeroGrad();
      sOn.zeroGrad();
      const rOff = await sOff.forwardBackward(data);
      const rOn = await sOn.forwardBackward(data);
      expect(rOff.stats?.aux_loss).toBeUndefined();
      const aux = rOn.stats!.aux_loss!;
      // The transcription on the model's own router logits (mask: the padding mask).
      const tape = new Tape({ stream: dev.defaultStream });
      tape.routerTaps = [];
      const b = uploadBatch(data.inputIds, data.batch, data.seqLen, dev, dev.defaultStream, data.attentionMask);
      sOn.model.forward(tape, b);
      const layers = await Promise.all(tape.routerTaps.map(async (t) => (await t.logits.value.toArray()) as Float32Array));
      expect(layers.length).toBe(on.numLayers);
      const want = hfAux(layers, on.moe!.numExperts, on.moe!.topK, data.attentionMask);
      for (const t of [b.ids, b.positions, b.mask]) t?.release();
      tape.release();
      expect(Math.abs(aux - want)).toBeLessThan(1e-5 * want);
      expect(aux).toBeGreaterThan(0.5);
      expect(Math.abs(rOn.loss - (rOff.loss + COEF * aux))).toBeLessThan(1e-5 * rOn.loss);
      // forward() reports the same loss (aux included), as HF's loss with labels.
      expect(Math.abs((await sOn.forward(data)).loss - rOn.loss)).toBeLessThan(1e-6 * rOn.loss);

      const gOn = await sOn.gatherState('grads');
      const gOff = await sOff.gatherState('grads');
      const values = await sOn.gatherState('params');
      const lossWith = perturbedLoss(sOn, dev, values, data);
      for (const name of [...gOn.keys()].filter((n) => n.endsWith('.mlp.gate.weight'))) {
        const a = gOn.get(name)!.data,
          z = gOff.get(name)!.data;
        let idx = 0;
        for (let i = 1; i < a.length; i++) if (Math.abs(a[i]! - z[i]!) > Math.abs(a[idx]! - z[idx]!)) idx = i;
        const h = 1e-3;
        const fd = ((await lossWith(name, idx, h)) - (await lossWith(name, idx, -h))) / (2 * h);
        await lossWith(name, idx, 0);
        const tol = 0.03 * Math.abs(a[idx]!) + 2e-4;
        expect(Math.abs(fd - a[idx]!), `${name}[${idx}]: backward ${a[idx]} vs finite difference ${fd}`).toBeLessThan(tol);
        // The flag-off gradient misses the finite difference by far more than the tolerance: a
        // backward that dropped the aux term would fail the line above.
        expect(Math.abs(fd - z[idx]!), `${name}: flag on and off give the same gradient`).toBeGreaterThan(2 * tol);
      }
    } finally {
      sOff.release();
      sOn.release();
    }
  }, 120_000);
});

describe('router aux loss with micro-batches (GRPO on qwen3_moe)', () => {
  it("each micro-batch adds its own aux, weighted by its rows' share of the optimizer step (auxScale)", async () => {
    const off = MODELS.qwen3_moe();
    const on = parseModelConfig({ ...toHFConfig(off), output_router_logits: true, router_aux_loss_coef: COEF });
    const dev = Device.get(0);
    const params = initialParams(off, 4);
    const sOff = SingleDeviceStrategy.create(off, dev, params);
    const sOn = SingleDeviceStrategy.create(on, dev, params);
    const b = shiftedBatch(3, 4, 8, off.vocabSize);
    const rows = (r0: number): TrainBatch => ({
      inputIds: b.inputIds.subarray(r0 * 8, (r0 + 2) * 8),
      targets: b.targets.subarray(r0 * 8, (r0 + 2) * 8),
      batch: 2,
      seqLen: 8,
    });
    let tokens = 0;
    for (const t of b.targets) if (t !== -100) tokens++;
    const o = { clipLow: 0.2, clipHigh: 0.28, beta: 0, temperature: 1, lossType: 'dapo' as const };
    const adv = Float32Array.from([1.2, -0.4, 0.7, -1.5]);
    try {
      for (const r0 of [0, 2]) {
        const data = { advantages: adv.subarray(r0, r0 + 2), norm: { rows: 4, tokens } };
        // The micro-batch's aux on its own (the default loss: the call is the whole step).
        const alone = (await sOn.forward(rows(r0))).stats!.aux_loss!;
        expect(alone).toBeGreaterThan(0.5);
        const rOn = await sOn.forwardBackward(rows(r0), grpoLoss(data, o));
        const rOff = await sOff.forwardBackward(rows(r0), grpoLoss(data, o));
        // Two of the step's four rows: half of its own aux.
        expect(Math.abs(rOn.stats!.aux_loss! - 0.5 * alone)).toBeLessThan(1e-6 * alone);
        expect(Math.abs(rOn.loss - (rOff.loss + COEF * 0.5 * alone))).toBeLessThan(1e-5 * Math.max(1, Math.abs(rOn.loss)));
      }
    } finally {
      sOff.release();
      sOn.release();
    }
  }, 120_000);
});

describe('router aux loss in the one-device SupervisedTrainer (qwen3_moe)', () => {
  it('the step loss is the flag-off loss + coef · aux, and the router weight trains differently', async () => {
    const off = MODELS.qwen3_moe();
    const on = parseModelConfig({ ...toHFConfig(off), output_router_logits: true, router_aux_loss_coef: COEF });
    const hp = { lr: 1e-2, weightDecay: 0 };
    const tOff = SupervisedTrainer.create(off, Device.get(0), 6, hp);
    const tOn = SupervisedTrainer.create(on, Device.get(0), 6, hp);
    try {
      const rOff = await tOff.step(1, 0, 4, 16);
      const rOn = await tOn.step(1, 0, 4, 16);
      expect(rOff.auxLoss).toBeUndefined();
      expect(rOn.auxLoss!).toBeGreaterThan(0.5);
      expect(Math.abs(rOn.loss! - (rOff.loss! + COEF * rOn.auxLoss!))).toBeLessThan(1e-5 * rOn.loss!);
      const name = 'model.layers.0.mlp.gate.weight';
      const a = (await tOn.params.get(name).value.toArray()) as Float32Array;
      const z = (await tOff.params.get(name).value.toArray()) as Float32Array;
      let diff = 0;
      for (let i = 0; i < a.length; i++) diff = Math.max(diff, Math.abs(a[i]! - z[i]!));
      expect(diff, 'the aux gradient reached the router weight').toBeGreaterThan(1e-4);
    } finally {
      tOff.params.release();
      tOn.params.release();
    }
  }, 120_000);
});
