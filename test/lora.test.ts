/**
 * LoRA adapters (src/model/lora*.ts) against independent references:
 * - config errors (unknown module, bad numbers, targets matching nothing, fused experts + dropout);
 * - at init (B = 0) the adapted model's logits equal the base model's bit for bit;
 * - with random A, B the adapted loss equals the base model's loss with host-merged weights
 *   W + s·B·A (dense targets on tiny-dense, fused experts + attention on tiny-moe), and the
 *   adapter gradients equal the merged formulation dL/dB = s·dW·Aᵀ, dL/dA = s·Bᵀ·dW (dW from
 *   the merged model, computed on the host in fp64);
 * - device merge() equals the host merge, the model without hooks then gives the adapted
 *   logits, unmerge() restores W within fp32 rounding; double merge / unmerge are errors;
 * - a dense projection with dropout equals host math with the same mask (forward and grads);
 *   masks are deterministic per seed and differ across seeds;
 * - training steps move only the adapters (base weights bit-identical) and lower the loss.
 */
import { describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { Tensor } from '../src/runtime/device/device-index.js';
import { ConfigError, InvalidArgumentError } from '../src/runtime/errors.js';
import { Tape, Var } from '../src/model/autograd.js';
import { loadModelConfig, type ModelConfig } from '../src/model/config.js';
import { initialParams } from '../src/model/params.js';
import { makeBatch } from '../src/data/synthetic-task.js';
import { uploadBatch } from '../src/model/qwen3.js';
import type { HostParam } from '../src/model/param-store.js';
import { LoraAdapters, loraParamSpecs, type LoraConfigInput } from '../src/model/index.js';
import { dropoutMask } from '../src/model/lora-ops.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import { rand } from './helpers/model-ref.js';

const cfgOf = (which: 'dense' | 'moe'): ModelConfig => loadModelConfig(new URL(`../examples/models/tiny-${which}/config.json`, import.meta.url).pathname);
const dense = cfgOf('dense');
const moe = cfgOf('moe');
const device = Device.get(0);
const stream = device.defaultStream;

const DENSE_LORA: LoraConfigInput = { rank: 4, alpha: 8, targetModules: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'], seed: 5 };
const MOE_LORA: LoraConfigInput = {
  rank: 4,
  alpha: 8,
  targetModules: ['q', 'v'],
  targetParameters: ['mlp.experts.gate_up_proj', 'mlp.experts.down_proj'],
  seed: 5,
};

/** Adapter params with B random too (init B is zero), so the update is not trivially 0. */
function randomAdapters(a: LoraAdapters, seed: number): Map<string, HostParam> {
  const host = a.initHost(seed);
  let k = 0;
  for (const t of a.targets) host.set(t.b, { shape: t.bShape, data: rand(host.get(t.b)!.data.length, seed * 1000 + ++k, 0.05) });
  return host;
}

/** Host W + sign·s·B·A in fp64 (per expert for 3-D), rounded to fp32. */
function hostMerge(w: HostParam, a: HostParam, b: HostParam, s: number): Float32Array {
  const E = w.shape.length === 3 ? w.shape[0]! : 1;
  const [out, inn] = w.shape.slice(-2) as [number, number];
  const r = a.shape[a.shape.length - 2]!;
  const res = new Float32Array(w.data.length);
  for (let e = 0; e < E; e++)
    for (let i = 0; i < out; i++)
      for (let j = 0; j < inn; j++) {
        let acc = 0;
        for (let q = 0; q < r; q++) acc += b.data[e * out * r + i * r + q]! * a.data[e * r * inn + q * inn + j]!;
        const idx = e * out * inn + i * inn + j;
        res[idx] = w.data[idx]! + s * acc;
      }
  return res;
}

function mergedParams(base: Map<string, HostParam>, a: LoraAdapters, ad: Map<string, HostParam>): Map<string, HostParam> {
  const out = new Map(base);
  for (const t of a.targets) out.set(t.base, { shape: base.get(t.base)!.shape, data: hostMerge(base.get(t.base)!, ad.get(t.a)!, ad.get(t.b)!, a.scaling) });
  return out;
}

/** Logits of a strategy's model on a batch (host copy). */
async function logits(s: SingleDeviceStrategy, seed: number): Promise<Float32Array> {
  const b = makeBatch(seed, 2, 16);
  const tape = new Tape({ stream });
  try {
    const ub = uploadBatch(b.inputIds, 2, 16, device, stream);
    tape.own(ub.ids);
    tape.own(ub.positions);
    return (await s.model.forward(tape, ub).value.toArray({ stream })) as Float32Array;
  } finally {
    tape.release();
  }
}

const maxAbs = (x: ArrayLike<number>) => Array.from(x).reduce((m, v) => Math.max(m, Math.abs(v)), 0);
const maxDiff = (x: ArrayLike<number>, y: ArrayLike<number>) => Array.from(x).reduce((m, v, i) => Math.max(m, Math.abs(v - y[i]!)), 0);

describe('LoRA config', () => {
  it('rejects bad values with errors that say what is wrong', () => {
    const bad = (c: unknown, re: RegExp, cfg = dense) => {
      expect(() => new LoraAdapters(cfg, c as LoraConfigInput)).toThrow(ConfigError);
      expect(() => new LoraAdapters(cfg, c as LoraConfigInput)).toThrow(re);
    };
    bad({ rank: 4, alpha: 8, targetModules: ['q', 'qkv'] }, /unknown module "qkv"; valid modules are q, k, v, o, gate, up, down/);
    bad({ rank: 0, alpha: 8, targetModules: ['q'] }, /rank: expected rank ≥ 1/);
    bad({ rank: 2.5, alpha: 8, targetModules: ['q'] }, /integer rank/);
    bad({ rank: 4, alpha: 0, targetModules: ['q'] }, /alpha: expected alpha > 0/);
    bad({ rank: 4, alpha: 8, dropout: 1, targetModules: ['q'] }, /dropout in \[0, 1\)/);
    bad({ rank: 4, alpha: 8, targetModules: ['q'], lora_alpha: 3 }, /lora_alpha/);
    bad({ rank: 4, alpha: 8 }, /no targets/);
    // tiny-moe has only MoE layers: no dense gate_proj anywhere.
    bad({ rank: 4, alpha: 8, targetModules: ['q', 'gate'] }, /targetModules \[gate\] match no parameter/, moe);
    bad({ rank: 4, alpha: 8, targetParameters: ['mlp.experts.up_proj'] }, /targetParameters \[mlp\.experts\.up_proj\] match no fused expert parameter/, moe);
    bad({ rank: 4, alpha: 8, targetParameters: ['mlp.experts.down_proj'] }, /match no fused expert parameter.*no MoE experts/, dense);
    bad({ rank: 4, alpha: 8, dropout: 0.1, targetParameters: ['mlp.experts.down_proj'] }, /grouped expert path has no per-token dropout mask/, moe);
  });

  it('lists PEFT-named adapter specs with shapes; a full expert name selects one layer', () => {
    const specs = loraParamSpecs(moe, { rank: 3, alpha: 3, targetModules: ['o'], targetParameters: ['model.layers.1.mlp.experts.gate_up_proj'] });
    const E = moe.moe!.numExperts,
      I = moe.moe!.intermediateSize,
      H = moe.hiddenSize;
    expect(specs.map((s) => [s.name, s.shape, s.base, s.kind])).toEqual([
      ['model.layers.0.self_attn.o_proj.lora_A.weight', [3, moe.numHeads * moe.headDim], 'model.layers.0.self_attn.o_proj.weight', 'linear'],
      ['model.layers.0.self_attn.o_proj.lora_B.weight', [H, 3], 'model.layers.0.self_attn.o_proj.weight', 'linear'],
      ['model.layers.1.self_attn.o_proj.lora_A.weight', [3, moe.numHeads * moe.headDim], 'model.layers.1.self_attn.o_proj.weight', 'linear'],
      ['model.layers.1.self_attn.o_proj.lora_B.weight', [H, 3], 'model.layers.1.self_attn.o_proj.weight', 'linear'],
      ['model.layers.1.mlp.experts.gate_up_proj.lora_A', [E, 3, H], 'model.layers.1.mlp.experts.gate_up_proj', 'experts'],
      ['model.layers.1.mlp.experts.gate_up_proj.lora_B', [E, 2 * I, 3], 'model.layers.1.mlp.experts.gate_up_proj', 'experts'],
    ]);
    const a = new LoraAdapters(moe, { rank: 3, alpha: 3, targetModules: ['o'] });
    const init = a.initHost();
    const A = init.get('model.layers.0.self_attn.o_proj.lora_A.weight')!.data;
    const bound = 1 / Math.sqrt(moe.numHeads * moe.headDim);
    expect(maxAbs(A)).toBeLessThanOrEqual(bound);
    expect(maxAbs(A)).toBeGreaterThan(0.5 * bound);
    expect(maxAbs(init.get('model.layers.0.self_attn.o_proj.lora_B.weight')!.data)).toBe(0);
    expect(a.initHost()).toEqual(init);
    expect(() => a.checkHost(new Map([...init].slice(1)))).toThrow(/missing \[model\.layers\.0\.self_attn\.o_proj\.lora_A\.weight\]/);
  });
});

describe.each([
  ['dense', dense, DENSE_LORA],
  ['moe', moe, MOE_LORA],
] as const)('LoRA on tiny-%s', (_which, cfg, loraCfg) => {
  it('at init (B = 0) the logits equal the base model exactly', async () => {
    const base = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 2));
    const lora = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 2), { lora: { config: loraCfg } });
    try {
      const [x, y] = [await logits(base, 3), await logits(lora, 3)];
      expect(Buffer.from(y.buffer).equals(Buffer.from(x.buffer))).toBe(true);
    } finally {
      base.release();
      lora.release();
    }
  });

  it('loss and adapter gradients equal the merged-weight model (s·dW·Aᵀ, s·Bᵀ·dW)', async () => {
    const params = initialParams(cfg, 4);
    const adapters = new LoraAdapters(cfg, loraCfg);
    const ad = randomAdapters(adapters, 9);
    const lora = SingleDeviceStrategy.create(cfg, device, params, { lora: { config: loraCfg, params: ad } });
    const merged = SingleDeviceStrategy.create(cfg, device, mergedParams(params, adapters, ad));
    try {
      const batch = makeBatch(21, 4, 16);
      lora.zeroGrad();
      merged.zeroGrad();
      const [l1, l2] = [await lora.forwardBackward(batch), await merged.forwardBackward(batch)];
      expect(Math.abs(l1.loss - l2.loss) / l2.loss).toBeLessThan(1e-5);
      const g = await lora.gatherState('grads');
      const gm = await merged.gatherState('grads');
      // Only adapters got gradients.
      expect([...g.keys()].sort()).toEqual([...adapters.names].sort());
      const s = adapters.scaling;
      for (const t of adapters.targets) {
        const dW = gm.get(t.base)!;
        const A = ad.get(t.a)!,
          B = ad.get(t.b)!;
        const E = t.kind === 'experts' ? t.baseShape[0]! : 1;
        const [out, inn] = t.baseShape.slice(-2) as [number, number];
        const r = t.aShape[t.aShape.length - 2]!;
        const wantA = new Float64Array(A.data.length),
          wantB = new Float64Array(B.data.length);
        for (let e = 0; e < E; e++)
          for (let i = 0; i < out; i++)
            for (let j = 0; j < inn; j++) {
              const d = s * dW.data[e * out * inn + i * inn + j]!;
              for (let q = 0; q < r; q++) {
                wantB[e * out * r + i * r + q]! += d * A.data[e * r * inn + q * inn + j]!;
                wantA[e * r * inn + q * inn + j]! += d * B.data[e * out * r + i * r + q]!;
              }
            }
        for (const [name, want] of [
          [t.a, wantA],
          [t.b, wantB],
        ] as const) {
          const got = g.get(name)!.data;
          const scale = maxAbs(want);
          expect(scale, name).toBeGreaterThan(0);
          expect(maxDiff(got, want) / scale, name).toBeLessThan(2e-5);
        }
      }
    } finally {
      lora.release();
      merged.release();
    }
  });

  it('merge() equals the host merge and gives the adapted logits without hooks; unmerge() restores W', async () => {
    const params = initialParams(cfg, 6);
    const adapters = new LoraAdapters(cfg, loraCfg);
    const ad = randomAdapters(adapters, 13);
    const lora = SingleDeviceStrategy.create(cfg, device, params, { lora: { config: loraCfg, params: ad } });
    const plain = SingleDeviceStrategy.create(cfg, device, params);
    try {
      const adapted = await logits(lora, 8);
      const get = (n: string) => (n.includes('lora_') ? lora.store.get(n).value : plain.store.get(n).value);
      expect(() => adapters.unmerge(get, stream)).toThrow(/not merged/);
      adapters.merge(get, stream);
      expect(() => adapters.merge(get, stream)).toThrow(/already merged/);
      const wantMerged = mergedParams(params, adapters, ad);
      const p = await plain.gatherState('params');
      for (const t of adapters.targets) {
        const w = wantMerged.get(t.base)!.data;
        expect(maxDiff(p.get(t.base)!.data, w) / maxAbs(w), t.base).toBeLessThan(1e-6);
      }
      const viaMerged = await logits(plain, 8);
      expect(maxDiff(viaMerged, adapted) / maxAbs(adapted)).toBeLessThan(1e-5);
      // Adapters now refuse to run on top of merged weights (sharing the same adapters object).
      const other = SingleDeviceStrategy.create(cfg, device, params);
      try {
        const h = adapters.hooks((_t, n) => (n.includes('lora_') ? lora.store.get(n) : other.store.get(n)));
        const tape = new Tape({ stream });
        const x = new Var(tape.own(Tensor.fromArray(device, rand(2 * cfg.hiddenSize, 1), [2, cfg.hiddenSize], { stream })));
        expect(() => h.linear(tape, x, other.store.get('model.layers.0.self_attn.q_proj.weight'), 'model.layers.0.self_attn.q_proj.weight')).toThrow(
          InvalidArgumentError,
        );
        tape.release();
      } finally {
        other.release();
      }
      adapters.unmerge(get, stream);
      const back = await plain.gatherState('params');
      for (const t of adapters.targets) {
        const w0 = params.get(t.base)!.data;
        const upd = maxAbs(wantMerged.get(t.base)!.data);
        // fp32: W + u − u is exact to within two roundings at the magnitude of W + u.
        expect(maxDiff(back.get(t.base)!.data, w0), t.base).toBeLessThanOrEqual(2 * upd * 2 ** -23);
      }
      const pristine = SingleDeviceStrategy.create(cfg, device, params);
      try {
        const want = await logits(pristine, 8);
        expect(maxDiff(await logits(plain, 8), want) / maxAbs(want)).toBeLessThan(1e-5);
      } finally {
        pristine.release();
      }
    } finally {
      lora.release();
      plain.release();
    }
  });

  it('training steps move only the adapters and lower the loss', async () => {
    const params = initialParams(cfg, 1);
    const s = SingleDeviceStrategy.create(cfg, device, params, { lora: { config: { ...loraCfg, dropout: cfg.moe ? 0 : 0.1 } } });
    try {
      const batch = makeBatch(31, 4, 16);
      const before = await s.gatherState('params');
      const losses: number[] = [];
      for (let step = 0; step < 6; step++) {
        s.zeroGrad();
        losses.push((await s.forwardBackward(batch)).loss);
        s.optimizerStep({ lr: 2e-2 });
      }
      const after = await s.gatherState('params');
      const names = new Set(s.lora!.adapters.names);
      for (const [name, p] of after) {
        const same = Buffer.from(p.data.buffer, p.data.byteOffset, p.data.byteLength).equals(
          Buffer.from(before.get(name)!.data.buffer, before.get(name)!.data.byteOffset, before.get(name)!.data.byteLength),
        );
        expect(same, name).toBe(!names.has(name));
      }
      expect(losses[5]!).toBeLessThan(losses[0]! * 0.97);
    } finally {
      s.release();
    }
  });
});

describe('LoRA dropout (dense)', () => {
  const T = 6,
    IN = 16,
    OUT = 12,
    R = 3,
    P = 0.3;
  const cfg: LoraConfigInput = { rank: R, alpha: 6, dropout: P, targetModules: ['q'] };

  it('one projection equals host math with the same mask, forward and gradients', async () => {
    const adapters = new LoraAdapters(dense, cfg);
    const name = 'model.layers.0.self_attn.q_proj.weight';
    const [xh, wh, ah, bh, gh] = [rand(T * IN, 1), rand(OUT * IN, 2, 0.2), rand(R * IN, 3, 0.3), rand(OUT * R, 4, 0.3), rand(T * OUT, 5)];
    const up = (d: Float32Array, shape: number[], grad: boolean) => new Var(Tensor.fromArray(device, d, shape, { stream }), grad);
    const x = up(xh, [T, IN], true),
      w = up(wh, [OUT, IN], false),
      a = up(ah, [R, IN], true),
      b = up(bh, [OUT, R], true);
    const vars = new Map([
      [`a`, a],
      ['b', b],
    ]);
    const h = adapters.hooks((_t, n) => vars.get(n.includes('lora_A') ? 'a' : 'b')!);
    h.dropoutSeed = 77;
    const tape = new Tape({ stream });
    try {
      const y = h.linear(tape, x, w, name)!;
      tape.backward(y, tape.own(Tensor.fromArray(device, gh, [T, OUT], { stream })));
      const [yd, dx, da, db] = await Promise.all([y.value, x.grad!, a.grad!, b.grad!].map(async (t) => (await t.toArray({ stream })) as Float32Array));
      const m = dropoutMask(77, name, T * IN, P);
      expect(m.some((v) => v === 0) && m.some((v) => v > 1)).toBe(true);
      const s = adapters.scaling;
      const xm = xh.map((v, i) => v * m[i]!);
      // Host fp64: u = xm·Aᵀ [T, R], y = x·Wᵀ + s·u·Bᵀ, gb = g·B [T, R]; dB = s·gᵀ·u, dA = s·gbᵀ·xm, dx = g·W + s·(gb·A)⊙m.
      const u = new Float64Array(T * R),
        gb = new Float64Array(T * R);
      for (let t = 0; t < T; t++) for (let q = 0; q < R; q++) for (let j = 0; j < IN; j++) u[t * R + q]! += xm[t * IN + j]! * ah[q * IN + j]!;
      for (let t = 0; t < T; t++) for (let q = 0; q < R; q++) for (let i = 0; i < OUT; i++) gb[t * R + q]! += gh[t * OUT + i]! * bh[i * R + q]!;
      const wantY = new Float64Array(T * OUT),
        wantDx = new Float64Array(T * IN),
        wantDa = new Float64Array(R * IN),
        wantDb = new Float64Array(OUT * R);
      for (let t = 0; t < T; t++)
        for (let i = 0; i < OUT; i++) {
          let acc = 0;
          for (let j = 0; j < IN; j++) acc += xh[t * IN + j]! * wh[i * IN + j]!;
          for (let q = 0; q < R; q++) acc += s * u[t * R + q]! * bh[i * R + q]!;
          wantY[t * OUT + i] = acc;
          for (let q = 0; q < R; q++) wantDb[i * R + q]! += s * gh[t * OUT + i]! * u[t * R + q]!;
          for (let j = 0; j < IN; j++) wantDx[t * IN + j]! += gh[t * OUT + i]! * wh[i * IN + j]!;
        }
      for (let t = 0; t < T; t++)
        for (let q = 0; q < R; q++)
          for (let j = 0; j < IN; j++) {
            wantDa[q * IN + j]! += s * gb[t * R + q]! * xm[t * IN + j]!;
            wantDx[t * IN + j]! += s * gb[t * R + q]! * ah[q * IN + j]! * m[t * IN + j]!;
          }
      for (const [got, want, what] of [
        [yd, wantY, 'y'],
        [dx, wantDx, 'dx'],
        [da, wantDa, 'dA'],
        [db, wantDb, 'dB'],
      ] as const) {
        expect(maxDiff(got, want) / maxAbs(want), what).toBeLessThan(1e-5);
      }
      expect(w.grad).toBeUndefined();
    } finally {
      tape.release();
      for (const v of [x, w, a, b]) {
        v.value.release();
        v.grad?.release();
      }
    }
  });

  it('masks are deterministic per seed, differ across seeds, and eval (null seed) has none', async () => {
    const loraCfg: LoraConfigInput = { rank: 4, alpha: 8, dropout: 0.2, targetModules: ['q', 'v', 'down'] };
    const params = initialParams(dense, 2);
    const adapters = new LoraAdapters(dense, loraCfg);
    const ad = randomAdapters(adapters, 3);
    const s = SingleDeviceStrategy.create(dense, device, params, { lora: { config: loraCfg, params: ad } });
    const nodrop = SingleDeviceStrategy.create(dense, device, params, { lora: { config: { ...loraCfg, dropout: 0 }, params: ad } });
    try {
      const h = s.lora!.hooks;
      h.dropoutSeed = 1;
      const a1 = await logits(s, 4);
      const a2 = await logits(s, 4);
      h.dropoutSeed = 2;
      const b1 = await logits(s, 4);
      h.dropoutSeed = null;
      const e = await logits(s, 4);
      const ref = await logits(nodrop, 4);
      expect(Buffer.from(a2.buffer).equals(Buffer.from(a1.buffer))).toBe(true);
      expect(maxDiff(a1, b1)).toBeGreaterThan(1e-4);
      expect(maxDiff(a1, ref)).toBeGreaterThan(1e-4);
      expect(Buffer.from(e.buffer).equals(Buffer.from(ref.buffer))).toBe(true);
      const m1 = dropoutMask(1, 'n', 4000, 0.2);
      const kept = m1.filter((v) => v !== 0).length / m1.length;
      expect(kept).toBeGreaterThan(0.75);
      expect(kept).toBeLessThan(0.85);
    } finally {
      s.release();
      nodrop.release();
    }
  });

  it('a LoRA run resumed from gathered state (adapters + AdamW) continues bit-identically, dropout included', async () => {
    const loraCfg: LoraConfigInput = { rank: 4, alpha: 8, dropout: 0.2, targetModules: ['q', 'o', 'up'], seed: 3 };
    const a = SingleDeviceStrategy.create(dense, device, initialParams(dense, 5), { lora: { config: loraCfg } });
    const b = SingleDeviceStrategy.create(dense, device, initialParams(dense, 6), { lora: { config: { ...loraCfg, seed: 3 } } });
    try {
      for (let step = 0; step < 2; step++) {
        a.zeroGrad();
        await a.forwardBackward(makeBatch(40 + step, 2, 16));
        a.optimizerStep({ lr: 1e-2 });
      }
      const [params, expAvg, expAvgSq] = [await a.gatherState('params'), await a.gatherState('exp_avg'), await a.gatherState('exp_avg_sq')];
      expect([...expAvg.keys()].sort()).toEqual([...a.lora!.adapters.names].sort());
      await b.loadState({ params, optimizer: { step: a.optimizerSteps, expAvg, expAvgSq } });
      const losses: number[] = [];
      for (const s of [a, b]) {
        s.zeroGrad();
        losses.push((await s.forwardBackward(makeBatch(50, 2, 16))).loss);
        s.optimizerStep({ lr: 1e-2 });
      }
      expect(losses[1]).toBe(losses[0]);
      const [pa, pb] = [await a.gatherState('params'), await b.gatherState('params')];
      for (const [name, p] of pa) expect(Buffer.from(pb.get(name)!.data.buffer).equals(Buffer.from(p.data.buffer)), name).toBe(true);
      // A base-only state cannot be loaded into a LoRA strategy: the adapters are named as missing.
      const baseOnly = new Map([...params].filter(([n]) => !n.includes('lora_')));
      await expect(b.loadState({ params: baseOnly })).rejects.toThrow(/lora_A\.weight is missing/);
    } finally {
      a.release();
      b.release();
    }
  });
});
