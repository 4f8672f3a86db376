/**
 * The Qwen3.5-MoE decoder (qwen3_5_moe) on the tape through the single-device strategy: backward
 * agrees with central finite differences of the loss for the sparse block's parameters (router,
 * fused experts, shared expert, shared_expert_gate) and the GDN / attention layers around them,
 * and AdamW steps lower the loss on a fixed batch.
 */
import { describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { parseModelConfig } from '../src/model/config.js';
import { initialParams } from '../src/model/params.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import { perturbedLoss, shiftedBatch } from './helpers/fd-loss.js';

const cfg = parseModelConfig({
  model_type: 'qwen3_5_moe_text',
  hidden_size: 32,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 16,
  rms_norm_eps: 1e-6,
  vocab_size: 40,
  linear_num_key_heads: 2,
  linear_num_value_heads: 4,
  linear_key_head_dim: 8,
  linear_value_head_dim: 8,
  linear_conv_kernel_dim: 4,
  layer_types: ['linear_attention', 'full_attention'],
  rope_parameters: { rope_type: 'default', rope_theta: 10000, partial_rotary_factor: 0.25 },
  num_experts: 4,
  num_experts_per_tok: 2,
  moe_intermediate_size: 8,
  shared_expert_intermediate_size: 12,
});

/** Weights large enough that every parameter gets a gradient well above fp32 noise. */
function params(seed: number) {
  const p = initialParams(cfg, seed);
  for (const [name, t] of p) {
    if (/proj|embed|lm_head|experts|shared_expert_gate|mlp\.gate\./.test(name)) for (let i = 0; i < t.data.length; i++) t.data[i]! *= 12;
    else if (/(layernorm|model\.norm|q_norm|k_norm)\.weight$/.test(name))
      for (let i = 0; i < t.data.length; i++) t.data[i] = 0.2 * Math.sin(7 * i + name.length);
  }
  return p;
}

const batch = (seed: number, B: number, S: number) => shiftedBatch(seed, B, S, cfg.vocabSize);

describe('qwen3_5_moe decoder on the single-device strategy', () => {
  it('backward agrees with central finite differences for router, experts, shared expert and its gate', async () => {
    const dev = Device.get(0);
    const s = SingleDeviceStrategy.create(cfg, dev, params(3));
    const data = batch(5, 2, 10);
    try {
      s.zeroGrad();
      await s.forwardBackward(data);
      const grads = await s.gatherState('grads');
      const values = await s.gatherState('params');
      const lossWith = perturbedLoss(s, dev, values, data);
      const names = [...grads.keys()].filter((n) => /\.mlp\.|in_proj_qkv|q_proj/.test(n));
      const kinds = new Set<string>();
      for (const name of names) {
        const g = grads.get(name)!.data;
        let idx = 0;
        for (let i = 1; i < g.length; i++) if (Math.abs(g[i]!) > Math.abs(g[idx]!)) idx = i;
        expect(Math.abs(g[idx]!), `${name} has no gradient`).toBeGreaterThan(1e-4);
        // A small step: a large one could move a token across the router's top-k boundary.
        const h = 1e-3;
        const fd = ((await lossWith(name, idx, h)) - (await lossWith(name, idx, -h))) / (2 * h);
        await lossWith(name, idx, 0);
        expect(Math.abs(fd - g[idx]!), `${name}[${idx}]: backward ${g[idx]} vs finite difference ${fd}`).toBeLessThan(0.03 * Math.abs(g[idx]!) + 2e-4);
        kinds.add(name.replace(/^model\.layers\.\d+\./, ''));
      }
      for (const k of [
        'mlp.gate.weight',
        'mlp.experts.gate_up_proj',
        'mlp.experts.down_proj',
        'mlp.shared_expert.gate_proj.weight',
        'mlp.shared_expert.up_proj.weight',
        'mlp.shared_expert.down_proj.weight',
        'mlp.shared_expert_gate.weight',
      ])
        expect(kinds, `no finite-difference check of ${k}`).toContain(k);
    } finally {
      s.release();
    }
  }, 120_000);

  it('AdamW steps lower the loss on a fixed batch', async () => {
    const s = SingleDeviceStrategy.create(cfg, Device.get(0), initialParams(cfg, 11));
    const data = batch(9, 4, 16);
    try {
      const before = (await s.forward(data)).loss!;
      for (let k = 0; k < 5; k++) {
        s.zeroGrad();
        await s.forwardBackward(data);
        s.optimizerStep({ lr: 1e-2, weightDecay: 0 });
      }
      const after = (await s.forward(data)).loss!;
      expect(Number.isFinite(after)).toBe(true);
      expect(after).toBeLessThan(before - 0.1);
    } finally {
      s.release();
    }
  }, 120_000);
});
