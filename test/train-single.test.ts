/**
 * The single-device strategy (the reference for the sharded ones): its loss and
 * gradients equal the SupervisedTrainer's, clipGradNorm matches an fp64 host norm and
 * scales the gradients, and gatherState / loadState round-trip parameters and AdamW
 * state exactly (two strategies stepped from the same state stay bit-identical).
 */
import { describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { loadModelConfig, type ModelConfig } from '../src/model/config.js';
import { SupervisedTrainer } from '../src/grpo/sft.js';
import { initialParams } from '../src/model/params.js';
import { makeBatch } from '../src/data/synthetic-task.js';
import { SingleDeviceStrategy } from '../src/train/single.js';

const cfgOf = (which: 'dense' | 'moe'): ModelConfig => loadModelConfig(new URL(`../examples/models/tiny-${which}/config.json`, import.meta.url).pathname);
const hp = { lr: 1e-2, weightDecay: 0.01 };

describe.each(['dense', 'moe'] as const)('single-device strategy, tiny %s', (which) => {
  const cfg = cfgOf(which);
  const device = Device.get(0);

  it('loss and gradients equal the SupervisedTrainer; clipping scales to maxNorm', async () => {
    const params = initialParams(cfg, 7);
    const b = makeBatch(11, 4, 24);
    const s = SingleDeviceStrategy.create(cfg, device, params);
    const ref = SupervisedTrainer.create(cfg, device, 7, hp);
    try {
      s.zeroGrad();
      ref.params.zeroGrad(ref.stream);
      const got = await s.forwardBackward(b);
      const want = await ref.forwardBackward(b.inputIds, b.targets, 4, 24, true);
      expect(got.loss).toBeCloseTo(want.loss!, 6);
      expect(got.tokens).toBe(want.tokens);
      const g = await s.gatherState('grads');
      const gr = await ref.params.toHost(ref.stream, 'grads');
      let ss = 0;
      for (const [name, p] of g) {
        expect([...p.data]).toEqual([...gr.get(name)!]);
        for (const x of p.data) ss += x * x;
      }
      const norm = await s.clipGradNorm(0.5 * Math.sqrt(ss));
      expect(norm / Math.sqrt(ss)).toBeCloseTo(1, 5);
      const clipped = await s.gatherState('grads');
      let ss2 = 0;
      for (const p of clipped.values()) for (const x of p.data) ss2 += x * x;
      expect(Math.sqrt(ss2) / (0.5 * Math.sqrt(ss))).toBeCloseTo(1, 4);
    } finally {
      s.release();
      ref.params.release();
    }
  });

  it('forward (eval mode) gives the forwardBackward loss and leaves the gradients alone', async () => {
    const s = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 8));
    try {
      const b = makeBatch(21, 4, 24);
      s.zeroGrad();
      const fb = await s.forwardBackward(b);
      const g1 = await s.gatherState('grads');
      const f = await s.forward(b);
      expect(f.loss).toBe(fb.loss);
      expect(f.tokens).toBe(fb.tokens);
      const g2 = await s.gatherState('grads');
      for (const [n, p] of g1) expect(Buffer.from(g2.get(n)!.data.buffer).equals(Buffer.from(p.data.buffer)), n).toBe(true);
    } finally {
      s.release();
    }
  });

  it('gatherState / loadState round-trip parameters and AdamW state exactly', async () => {
    const a = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 3));
    const b = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 99));
    try {
      for (let step = 0; step < 2; step++) {
        a.zeroGrad();
        await a.forwardBackward(makeBatch(5 + step, 4, 24));
        a.optimizerStep(hp);
      }
      const [params, expAvg, expAvgSq] = [await a.gatherState('params'), await a.gatherState('exp_avg'), await a.gatherState('exp_avg_sq')];
      await b.loadState({ params, optimizer: { step: a.optimizerSteps, expAvg, expAvgSq } });
      expect(b.optimizerSteps).toBe(2);
      for (const s of [a, b]) {
        s.zeroGrad();
        await s.forwardBackward(makeBatch(77, 4, 24));
        s.optimizerStep(hp);
      }
      const pa = await a.gatherState('params');
      const pb = await b.gatherState('params');
      for (const [name, p] of pa) expect(Buffer.from(pb.get(name)!.data.buffer).equals(Buffer.from(p.data.buffer)), name).toBe(true);
      await expect(b.loadState({ params: new Map([...params].slice(1)) })).rejects.toThrow(/missing/);
    } finally {
      a.release();
      b.release();
    }
  });
});
