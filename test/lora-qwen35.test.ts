/**
 * LoRA on Qwen3.5 and Qwen3.5-MoE (single strategy): adapters on the Gated DeltaNet projections
 * (in_proj_qkv / z / b / a, out_proj), the gated q_proj, o_proj, the dense MLP or the shared expert
 * and the fused experts. With random B the adapted logits equal those of a plain model holding the
 * merged weights W + s·B·A (host fp64 merge) and of the device merge(); training moves only the
 * adapters and lowers the loss; a module the model does not have is refused by name.
 */
import { describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { ConfigError } from '../src/runtime/errors.js';
import { Tape } from '../src/model/autograd.js';
import { parseModelConfig, type ModelConfig } from '../src/model/config.js';
import { initialParams } from '../src/model/params.js';
import { uploadBatch } from '../src/model/qwen3.js';
import type { HostParam } from '../src/model/param-store.js';
import { LoraAdapters, type LoraConfigInput } from '../src/model/index.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import type { TrainBatch } from '../src/train/strategy.js';
import { MOE_TEXT, TEXT } from './helpers/qwen35-configs.js';
import { rand } from './helpers/model-ref.js';
import { shiftedBatch } from './helpers/fd-loss.js';

const device = Device.get(0);
const stream = device.defaultStream;
const dense = parseModelConfig(TEXT);
const moe = parseModelConfig(MOE_TEXT);
const GDN = ['in_proj_qkv', 'in_proj_z', 'in_proj_b', 'in_proj_a', 'out_proj'] as const;
const DENSE_LORA: LoraConfigInput = { rank: 4, alpha: 8, targetModules: [...GDN, 'q', 'o', 'gate', 'up', 'down'], seed: 5 };
const MOE_LORA: LoraConfigInput = {
  rank: 4,
  alpha: 8,
  targetModules: [...GDN, 'q', 'v', 'shared_gate', 'shared_up', 'shared_down'],
  targetParameters: ['mlp.experts.gate_up_proj', 'mlp.experts.down_proj'],
  seed: 5,
};

function randomAdapters(a: LoraAdapters, seed: number): Map<string, HostParam> {
  const host = a.initHost(seed);
  let k = 0;
  for (const t of a.targets) host.set(t.b, { shape: t.bShape, data: rand(host.get(t.b)!.data.length, seed * 1000 + ++k, 0.05) });
  return host;
}

/** W + s·B·A in fp64 (per expert for 3-D weights), rounded to fp32. */
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

const tokens = (cfg: ModelConfig, seed: number, B: number, S: number): Int32Array => shiftedBatch(seed, B, S, cfg.vocabSize).inputIds;
const trainBatch = (cfg: ModelConfig, seed: number, B: number, S: number): TrainBatch => shiftedBatch(seed, B, S, cfg.vocabSize);

async function logits(s: SingleDeviceStrategy, cfg: ModelConfig, seed: number): Promise<Float32Array> {
  const tape = new Tape({ stream });
  try {
    const ub = uploadBatch(tokens(cfg, seed, 2, 12), 2, 12, device, stream);
    tape.own(ub.ids);
    tape.own(ub.positions);
    return (await s.model.forward(tape, ub).value.toArray({ stream })) as Float32Array;
  } finally {
    tape.release();
  }
}

const maxAbs = (x: ArrayLike<number>) => Array.from(x).reduce((m, v) => Math.max(m, Math.abs(v)), 0);
const maxDiff = (x: ArrayLike<number>, y: ArrayLike<number>) => Array.from(x).reduce((m, v, i) => Math.max(m, Math.abs(v - y[i]!)), 0);

describe.each([
  ['qwen3_5', dense, DENSE_LORA],
  ['qwen3_5_moe', moe, MOE_LORA],
] as const)('LoRA on %s', (_type, cfg, loraCfg) => {
  it('adapts every requested projection of the new layers', () => {
    const bases = new LoraAdapters(cfg, loraCfg).targets.map((t) => t.base);
    for (const m of GDN) expect(bases).toContain(`model.layers.0.linear_attn.${m}.weight`);
    expect(bases).toContain('model.layers.3.self_attn.q_proj.weight');
    expect(bases.some((b) => b.startsWith('model.layers.0.self_attn'))).toBe(false); // layer 0 is GDN
    if (cfg.moe) expect(bases).toContain('model.layers.2.mlp.shared_expert.down_proj.weight');
  });

  it('the adapted logits equal the merged weights, on the host and by merge()', async () => {
    const params = initialParams(cfg, 4);
    const adapters = new LoraAdapters(cfg, loraCfg);
    const ad = randomAdapters(adapters, 9);
    const merged = new Map(params);
    for (const t of adapters.targets)
      merged.set(t.base, { shape: params.get(t.base)!.shape, data: hostMerge(params.get(t.base)!, ad.get(t.a)!, ad.get(t.b)!, adapters.scaling) });
    const lora = SingleDeviceStrategy.create(cfg, device, params, { lora: { config: loraCfg, params: ad } });
    const hostMerged = SingleDeviceStrategy.create(cfg, device, merged);
    const plain = SingleDeviceStrategy.create(cfg, device, params);
    try {
      const adapted = await logits(lora, cfg, 3);
      const base = await logits(plain, cfg, 3);
      // The adapters must change the logits, or the equalities below would prove nothing.
      expect(maxDiff(adapted, base) / maxAbs(base)).toBeGreaterThan(1e-3);
      expect(maxDiff(await logits(hostMerged, cfg, 3), adapted) / maxAbs(adapted)).toBeLessThan(1e-5);
      adapters.merge((n) => (n.includes('lora_') ? lora.store.get(n).value : plain.store.get(n).value), stream);
      expect(maxDiff(await logits(plain, cfg, 3), adapted) / maxAbs(adapted)).toBeLessThan(1e-5);
    } finally {
      lora.release();
      hostMerged.release();
      plain.release();
    }
  });

  it('training steps move only the adapters and lower the loss', async () => {
    const s = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 1), { lora: { config: loraCfg } });
    try {
      const batch = trainBatch(cfg, 31, 4, 16);
      const before = await s.gatherState('params');
      const losses: number[] = [];
      for (let step = 0; step < 6; step++) {
        s.zeroGrad();
        losses.push((await s.forwardBackward(batch)).loss);
        s.optimizerStep({ lr: 2e-2 });
      }
      const after = await s.gatherState('params');
      const names = new Set(s.lora!.adapters.names);
      expect(names.size).toBeGreaterThan(0);
      for (const [name, p] of after) {
        const b = before.get(name)!.data;
        const same = Buffer.from(p.data.buffer, p.data.byteOffset, p.data.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
        expect(same, name).toBe(!names.has(name));
      }
      expect(losses[5]!).toBeLessThan(losses[0]! * 0.97);
    } finally {
      s.release();
    }
  });
});

describe('LoRA modules a model does not have', () => {
  it('are refused by name', () => {
    expect(() => new LoraAdapters(dense, { rank: 2, alpha: 2, targetModules: ['shared_up'] })).toThrow(ConfigError);
    expect(() => new LoraAdapters(dense, { rank: 2, alpha: 2, targetModules: ['shared_up'] })).toThrow(/\[shared_up\].*mlp\.shared_expert\.up_proj/);
    expect(() => new LoraAdapters(moe, { rank: 2, alpha: 2, targetModules: ['gate'] })).toThrow(/\[gate\] match no parameter of this qwen3_5_moe model/);
  });
});
