/**
 * GRPO math: group advantages against a hand computation, the per-token objective's
 * derivative against fp64 central differences, and the loss on the single-device
 * strategy: at ratio 1 with advantage 1 its gradient is exactly the token-mean
 * cross-entropy gradient (an independent path through the CE kernel), and a ratio
 * beyond the clip range with a positive advantage gives zero gradient and a clip
 * fraction of 1.
 */
import { describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { loadModelConfig } from '../src/model/config.js';
import { initialParams } from '../src/model/params.js';
import { makeBatch } from '../src/data/synthetic-task.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import { groupAdvantages, groupsWithSpread } from '../src/grpo/advantages.js';
import { tokenTerms } from '../src/grpo/token-terms.js';
import { grpoLoss } from '../src/grpo/loss.js';
import { tokenLogprobs } from '../src/train/logprobs.js';
import { Tensor } from '../src/runtime/device/tensor.js';
import type { LossFn } from '../src/train/strategy.js';
import { maxRelOverTensors } from './helpers/grad-compare.js';

describe('group advantages', () => {
  it('reward minus group mean over the unbiased group std; flat groups give 0', () => {
    const a = groupAdvantages([1, 0, 0.5, 0.5, 3, 1], { numGenerations: 2, eps: 0 });
    const s = Math.sqrt(0.5); // std of {1, 0} with n - 1
    expect(a[0]).toBeCloseTo(0.5 / s, 12);
    expect(a[1]).toBeCloseTo(-0.5 / s, 12);
    expect([a[2], a[3]]).toEqual([0, 0]);
    expect(a[4]).toBeCloseTo(1 / Math.sqrt(2), 12);
    expect([...groupAdvantages([1, 0], { numGenerations: 2, scaleByStd: false })]).toEqual([0.5, -0.5]);
    // scale 'batch': group means, the whole batch's std (unbiased).
    const r = [1, 0, 0.5, 0.5, 3, 1];
    const m = r.reduce((x, y) => x + y, 0) / 6;
    const sb = Math.sqrt(r.reduce((x, y) => x + (y - m) ** 2, 0) / 5);
    const b = groupAdvantages(r, { numGenerations: 2, eps: 0, scale: 'batch' });
    expect(b[0]).toBeCloseTo(0.5 / sb, 12);
    expect(b[4]).toBeCloseTo(1 / sb, 12);
    expect([b[2], b[3]]).toEqual([0, 0]);
    expect([...groupAdvantages(r, { numGenerations: 2, scale: 'none' })]).toEqual([0.5, -0.5, 0, 0, 1, -1]);
    // Dynamic sampling keeps the groups with a spread, cut so their rows are a multiple.
    expect(groupsWithSpread([1, 1, 0, 1, 2, 2, 3, 0, 5, 6], 2, 1)).toEqual([1, 3, 4]);
    expect(groupsWithSpread([1, 1, 0, 1, 2, 2, 3, 0, 5, 6], 2, 4)).toEqual([1, 3]);
    expect(groupsWithSpread([1, 1, 2, 2], 2, 2)).toEqual([]);
    expect(() => groupAdvantages([1, 2, 3], { numGenerations: 2 })).toThrow(/do not form groups of numGenerations = 2/);
  });
});

describe('per-token objective', () => {
  it('dObj/dlogp matches central differences (clip inactive and active, with KL)', () => {
    const o = { clipLow: 0.2, clipHigh: 0.28, beta: 0.05 };
    let checked = 0;
    for (let i = 0; i < 200; i++) {
      const logp = -3 + (i % 17) * 0.17;
      const old = logp + (((i * 7) % 11) - 5) * 0.07;
      const ref = logp + (((i * 3) % 7) - 3) * 0.1;
      const adv = (((i * 5) % 9) - 4) * 0.4;
      const h = 1e-6;
      const f = (x: number) => tokenTerms(x, old, ref, adv, o).obj;
      const r = Math.exp(logp - old);
      if (Math.abs(r - 0.8) < 1e-4 || Math.abs(r - 1.28) < 1e-4) continue; // kinks
      const fd = (f(logp + h) - f(logp - h)) / (2 * h);
      expect(tokenTerms(logp, old, ref, adv, o).dObjDLogp).toBeCloseTo(fd, 5);
      checked++;
    }
    expect(checked).toBeGreaterThan(190);
    const t = tokenTerms(0, -1, undefined, 1, o); // ratio e > 1.28, A > 0: clipped
    expect(t.clipped).toBe(true);
    expect(t.dObjDLogp).toBe(0);
  });
});

describe('GRPO loss on the single-device strategy', () => {
  const cfg = loadModelConfig(new URL('../examples/models/tiny-moe/config.json', import.meta.url).pathname);
  const device = Device.get(0);
  const b = makeBatch(3, 4, 24);

  async function currentLogprobs(s: SingleDeviceStrategy): Promise<Float32Array> {
    let out = new Float32Array(0);
    const capture: LossFn = async (tape, logits, rows) => {
      const tgt = tape.own(Tensor.fromArray(device, rows.targets, [rows.targets.length], { stream: tape.stream }));
      const lp = tokenLogprobs(tape, logits, tgt, 1);
      out = (await lp.value.toArray({ stream: tape.stream })) as Float32Array;
      return { perToken: lp, weights: new Float32Array(lp.value.numel) };
    };
    s.zeroGrad();
    await s.forwardBackward({ ...b, trimPadding: false }, capture); // [B·S], as the loss reads old log-probs
    s.zeroGrad();
    return out;
  }

  it('ratio 1, advantage 1: the gradient of token-mean cross-entropy; beyond the clip range: none', async () => {
    const s = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 2));
    try {
      const old = await currentLogprobs(s);
      const r = await s.forwardBackward(
        b,
        grpoLoss({ oldLogprobs: old, advantages: new Float32Array(4).fill(1) }, { clipLow: 0.2, clipHigh: 0.2, beta: 0, temperature: 1 }),
      );
      expect(r.loss).toBeCloseTo(-1, 5);
      expect(r.stats!.clipped).toBe(0);
      const g = await s.gatherState('grads');
      s.zeroGrad();
      const ce = await s.forwardBackward(b);
      expect(ce.tokens).toBe(r.tokens);
      const gce = await s.gatherState('grads');
      for (const [n, p] of g) {
        const q = gce.get(n)!.data;
        let err = 0,
          mag = 0;
        for (let i = 0; i < q.length; i++) {
          err = Math.max(err, Math.abs(p.data[i]! - q[i]!));
          mag = Math.max(mag, Math.abs(q[i]!));
        }
        expect(err / mag, n).toBeLessThan(1e-5);
      }
      s.zeroGrad();
      const shifted = old.map((x) => x - 1);
      const c = await s.forwardBackward(
        b,
        grpoLoss({ oldLogprobs: shifted, advantages: new Float32Array(4).fill(1) }, { clipLow: 0.2, clipHigh: 0.2, beta: 0, temperature: 1 }),
      );
      expect(c.stats!.clipped).toBe(c.stats!.tokens);
      for (const p of (await s.gatherState('grads')).values()) expect(p.data.every((x) => x === 0)).toBe(true);
      await expect(
        s.forwardBackward(b, grpoLoss({ oldLogprobs: old, advantages: new Float32Array(4) }, { clipLow: 0.2, clipHigh: 0.2, beta: 0.1, temperature: 1 })),
      ).rejects.toThrow(/needs refLogprobs/);
    } finally {
      s.release();
    }
  });

  it('without old log-probs the ratio is exactly 1 (the same gradient as with them); micro-batches normalised over their mini-batch accumulate to the whole batch, for every loss type', async () => {
    const s = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 2));
    const grads = async () => {
      const g = await s.gatherState('grads');
      s.zeroGrad();
      return g;
    };
    try {
      const old = await currentLogprobs(s);
      const adv = Float32Array.from([1.2, -0.4, 0.7, -1.5]);
      const base = { clipLow: 0.2, clipHigh: 0.28, beta: 0, temperature: 1 };
      const withOld = await s.forwardBackward(b, grpoLoss({ oldLogprobs: old, advantages: adv }, base));
      const gOld = await grads();
      const noOld = await s.forwardBackward(b, grpoLoss({ advantages: adv }, base));
      expect(noOld.stats!.ratio).toBe(noOld.stats!.tokens);
      expect(noOld.loss).toBeCloseTo(withOld.loss, 6);
      expect(maxRelOverTensors(await grads(), gOld)).toBeLessThan(1e-5);
      const half = (a: Float32Array, r0: number) => a.subarray(r0 * b.seqLen, (r0 + 2) * b.seqLen);
      const rows = (r0: number) => ({
        inputIds: b.inputIds.subarray(r0 * b.seqLen, (r0 + 2) * b.seqLen),
        targets: b.targets.subarray(r0 * b.seqLen, (r0 + 2) * b.seqLen),
        batch: 2,
        seqLen: b.seqLen,
      });
      let tokens = 0;
      for (const t of b.targets) if (t !== -100) tokens++;
      for (const lossType of ['grpo', 'bnpo', 'dr_grpo', 'dapo'] as const) {
        // A shifted old policy so ratios differ from 1 and some clip.
        const shifted = old.map((x, i) => x + 0.3 * Math.sin(i));
        const o = { ...base, lossType, maxCompletionLength: 16 };
        const whole = await s.forwardBackward(b, grpoLoss({ oldLogprobs: shifted, advantages: adv }, o));
        const gWhole = await grads();
        let sum = 0;
        for (const r0 of [0, 2]) {
          const r = await s.forwardBackward(
            rows(r0),
            grpoLoss({ oldLogprobs: half(shifted, r0), advantages: adv.subarray(r0, r0 + 2), norm: { rows: 4, tokens } }, o),
          );
          sum += r.loss;
        }
        const gAcc = await grads();
        if (lossType !== 'bnpo') {
          // bnpo is a per-micro-batch token mean by definition (TRL's local normaliser): only its parts are checked.
          expect(sum, lossType).toBeCloseTo(whole.loss, 5);
          expect(maxRelOverTensors(gAcc, gWhole), lossType).toBeLessThan(1e-4);
        } else expect(Number.isFinite(sum)).toBe(true);
      }
    } finally {
      s.release();
    }
  });
});
