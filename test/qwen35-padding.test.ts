/**
 * Padding in the Qwen3.5 forward: with the batch's 2-D padding mask, the logits at the real
 * positions of a left-padded and of a right-padded batch equal those of each sequence run alone
 * (Gated DeltaNet layers, dense and MoE MLPs); without the mask a left-padded row is wrong (the
 * pads enter the conv and the recurrence). A 4-D mask is refused at the model, and so is left
 * padding in a model with full attention (no key mask in this build); right padding there is exact.
 * Through the single strategy (TrainBatch.attentionMask), a left-padded batch has the loss and the
 * gradients of the same rows right-padded.
 */
import { describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { Tensor } from '../src/runtime/device/device-index.js';
import { InvalidArgumentError } from '../src/runtime/errors.js';
import { Tape } from '../src/model/autograd.js';
import { parseModelConfig, type ModelConfig } from '../src/model/config.js';
import { createModel } from '../src/model/create-model.js';
import { ParamStore } from '../src/model/param-store.js';
import { initialParams } from '../src/model/params.js';
import { uploadBatch, type Batch } from '../src/model/qwen3.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import type { TrainBatch } from '../src/train/strategy.js';
import { MOE_TEXT, TEXT } from './helpers/qwen35-configs.js';

const device = Device.get(0);
const stream = device.defaultStream;
const gdnOnly = (text: Record<string, unknown>) => parseModelConfig({ ...text, num_hidden_layers: 3, layer_types: new Array(3).fill('linear_attention') });
const SEQS = [
  [5, 9, 14, 7, 3, 30, 2],
  [1, 33, 8, 8, 12, 19, 27, 4, 11, 6, 21],
];
const S = 12;
const PAD = 0;

/** Logits [B·S, V] of the model on ids [B, S] (mask: the 2-D padding mask, flattened). */
async function run(cfg: ModelConfig, store: ParamStore, ids: number[][], mask?: number[][], patch?: (b: Batch) => void): Promise<Float32Array> {
  const model = createModel(cfg, store);
  const tape = new Tape({ stream });
  try {
    const b = uploadBatch(Int32Array.from(ids.flat()), ids.length, ids[0]!.length, device, stream, mask && Int32Array.from(mask.flat()));
    for (const t of [b.ids, b.positions, b.mask]) if (t) tape.own(t);
    patch?.(b);
    return (await model.forward(tape, b).value.toArray({ stream })) as Float32Array;
  } finally {
    tape.release();
  }
}

function padded(side: 'left' | 'right'): { ids: number[][]; mask: number[][] } {
  const ids = SEQS.map((q) => (side === 'left' ? [...new Array(S - q.length).fill(PAD), ...q] : [...q, ...new Array(S - q.length).fill(PAD)]));
  const mask = SEQS.map((q) =>
    side === 'left' ? [...new Array(S - q.length).fill(0), ...q.map(() => 1)] : [...q.map(() => 1), ...new Array(S - q.length).fill(0)],
  );
  return { ids, mask };
}

/** Worst |padded − alone| over the real positions, relative to the largest logit. */
async function worstAtRealPositions(cfg: ModelConfig, store: ParamStore, side: 'left' | 'right', withMask: boolean): Promise<number> {
  const V = cfg.vocabSize;
  const { ids, mask } = padded(side);
  const got = await run(cfg, store, ids, withMask ? mask : undefined);
  let worst = 0,
    scale = 0;
  for (let b = 0; b < SEQS.length; b++) {
    const q = SEQS[b]!;
    const alone = await run(cfg, store, [q]);
    const off = side === 'left' ? S - q.length : 0;
    for (let t = 0; t < q.length; t++)
      for (let v = 0; v < V; v++) {
        const want = alone[t * V + v]!;
        scale = Math.max(scale, Math.abs(want));
        worst = Math.max(worst, Math.abs(got[(b * S + off + t) * V + v]! - want));
      }
  }
  expect(scale).toBeGreaterThan(0.1);
  return worst / scale;
}

describe.each([
  ['qwen3_5', gdnOnly(TEXT)],
  ['qwen3_5_moe', gdnOnly(MOE_TEXT)],
])('%s (Gated DeltaNet layers) with a padding mask', (_type, cfg) => {
  const params = initialParams(cfg, 21);
  for (const [name, t] of params) if (/proj|embed|lm_head|experts|mlp\.gate\./.test(name)) for (let i = 0; i < t.data.length; i++) t.data[i]! *= 8;

  it('left- and right-padded rows give their tokens the logits of the sequences alone', async () => {
    const store = ParamStore.fromHost(cfg, device, params, stream);
    try {
      expect(await worstAtRealPositions(cfg, store, 'left', true)).toBeLessThan(1e-5);
      expect(await worstAtRealPositions(cfg, store, 'right', true)).toBeLessThan(1e-5);
      // Right padding is causal-safe without a mask; left padding is not: the pads enter the conv and the state.
      expect(await worstAtRealPositions(cfg, store, 'right', false)).toBeLessThan(1e-5);
      expect(await worstAtRealPositions(cfg, store, 'left', false)).toBeGreaterThan(1e-3);
    } finally {
      store.release();
    }
  }, 60_000);

  it('refuses a 4-D attention mask at the model', async () => {
    const store = ParamStore.fromHost(cfg, device, params, stream);
    try {
      const { ids, mask } = padded('left');
      const fourD = (b: Batch) => {
        b.mask = Tensor.fromArray(device, new Int32Array(2 * S * S).fill(1), [2, 1, S, S], { stream });
      };
      const err = await run(cfg, store, ids, mask, fourD).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message).toMatch(
        /must be the 2-D \[2, 12\] int32 padding mask.*\[2, 1, 12, 12\].*4-D attention mask must never reach the Gated DeltaNet.*HINT/,
      );
    } finally {
      store.release();
    }
  });
});

/** The padded rows as a train batch: next-token targets inside each sequence, -100 elsewhere. */
function trainBatch(side: 'left' | 'right', withMask: boolean): TrainBatch {
  const { ids, mask } = padded(side);
  const targets = new Int32Array(SEQS.length * S).fill(-100);
  SEQS.forEach((q, b) => {
    const off = side === 'left' ? S - q.length : 0;
    for (let t = 0; t + 1 < q.length; t++) targets[b * S + off + t] = q[t + 1]!;
  });
  const out: TrainBatch = { inputIds: Int32Array.from(ids.flat()), targets, batch: SEQS.length, seqLen: S };
  if (withMask) out.attentionMask = Int32Array.from(mask.flat());
  return out;
}

describe('the single strategy with TrainBatch.attentionMask', () => {
  const cfg = gdnOnly(MOE_TEXT);

  it('a left-padded batch has the loss and gradients of the right-padded one', async () => {
    const s = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 23));
    const lossAndGrads = async (b: TrainBatch) => {
      s.zeroGrad();
      const loss = (await s.forwardBackward(b)).loss;
      return { loss, grads: await s.gatherState('grads') };
    };
    try {
      const right = await lossAndGrads(trainBatch('right', false));
      const left = await lossAndGrads(trainBatch('left', true));
      const unmasked = await lossAndGrads(trainBatch('left', false));
      expect(Math.abs(left.loss - right.loss)).toBeLessThan(1e-5 * Math.abs(right.loss));
      expect(Math.abs(unmasked.loss - right.loss)).toBeGreaterThan(1e-4 * Math.abs(right.loss));
      let worst = 0,
        scale = 0;
      for (const [name, g] of right.grads) {
        const l = left.grads.get(name)!.data;
        g.data.forEach((v, i) => {
          scale = Math.max(scale, Math.abs(v));
          worst = Math.max(worst, Math.abs(l[i]! - v));
        });
      }
      expect(scale).toBeGreaterThan(1e-3);
      expect(worst / scale).toBeLessThan(1e-4);
    } finally {
      s.release();
    }
  }, 60_000);

  it('refuses a mask of the wrong length or values, and left padding with full attention', async () => {
    const s = SingleDeviceStrategy.create(parseModelConfig(TEXT), device, initialParams(parseModelConfig(TEXT), 1));
    try {
      const bad = { ...trainBatch('right', true), attentionMask: new Int32Array(5) };
      await expect(s.forward(bad)).rejects.toThrow(/attentionMask must be an Int32Array of batch x seqLen = 24 values.*got 5 values.*HINT/);
      await expect(s.forward(trainBatch('left', true))).rejects.toThrow(InvalidArgumentError);
      expect(Number.isFinite((await s.forward(trainBatch('right', true))).loss)).toBe(true);
    } finally {
      s.release();
    }
  });
});

describe('qwen3_5 with full attention and a padding mask', () => {
  const cfg = parseModelConfig(TEXT);
  const params = initialParams(cfg, 22);
  for (const [name, t] of params) if (/proj|embed|lm_head/.test(name)) for (let i = 0; i < t.data.length; i++) t.data[i]! *= 8;

  it('right padding is exact; left padding is refused with a hint', async () => {
    const store = ParamStore.fromHost(cfg, device, params, stream);
    try {
      expect(await worstAtRealPositions(cfg, store, 'right', true)).toBeLessThan(1e-5);
      const { ids, mask } = padded('left');
      await expect(run(cfg, store, ids, mask)).rejects.toThrow(/forward \(full attention\): the batch is left-padded.*no key mask.*HINT: right-pad/);
    } finally {
      store.release();
    }
  }, 60_000);

  it('uploadBatch refuses a mask of the wrong size or values', () => {
    expect(() => uploadBatch(new Int32Array(4), 2, 2, device, stream, new Int32Array(3))).toThrow(/2×2 = 4 values of 0 \(pad\) or 1 \(token\).*has 3 values/);
    expect(() => uploadBatch(new Int32Array(4), 2, 2, device, stream, Int32Array.from([1, 1, 2, 1]))).toThrow(/one is neither 0 nor 1/);
  });
});
