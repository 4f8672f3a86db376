/**
 * Qwen3.5 configs as the hub writes them (nested text_config of Qwen3_5ForConditionalGeneration,
 * flat qwen3_5_text), their parameter names, text-only loading, and the refusal of every path but
 * the single strategy.
 */
import { describe, expect, it } from 'vitest';
import { ConfigError, CheckpointFormatError } from '../src/runtime/errors.js';
import { assertSingleStrategyModel, parseModelConfig, toHFConfig } from '../src/model/config.js';
import { paramSpecs, checkParamsAgainstConfig, initParams } from '../src/model/params.js';
import { textOnlyWeights } from '../src/model/params-qwen35.js';
import { RolloutEngine } from '../src/rollout/engine.js';
import { MegatronStrategy } from '../src/train/megatron/strategy.js';
import { Fsdp2Strategy } from '../src/train/fsdp2/strategy.js';
import { ServerSync } from '../src/sync/server.js';
import { Device } from '../src/runtime/device/device.js';

/** A shrunken Qwen3.5 text config, in the hub's field spelling. */
export const TEXT = {
  model_type: 'qwen3_5_text',
  hidden_size: 32,
  intermediate_size: 48,
  num_hidden_layers: 4,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 16,
  hidden_act: 'silu',
  rms_norm_eps: 1e-6,
  vocab_size: 40,
  attention_bias: false,
  linear_num_key_heads: 2,
  linear_num_value_heads: 4,
  linear_key_head_dim: 8,
  linear_value_head_dim: 8,
  linear_conv_kernel_dim: 4,
  layer_types: ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention'],
  rope_parameters: { rope_type: 'default', rope_theta: 10000000, partial_rotary_factor: 0.25, mrope_section: [1, 1, 0], mrope_interleaved: true },
  max_position_embeddings: 262144,
  eos_token_id: 248044,
  dtype: 'bfloat16',
};

function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return e as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('qwen3_5 config', () => {
  it('parses the nested text_config of a ForConditionalGeneration config.json', () => {
    const cfg = parseModelConfig({
      architectures: ['Qwen3_5ForConditionalGeneration'],
      model_type: 'qwen3_5',
      tie_word_embeddings: true,
      text_config: { ...TEXT, tie_word_embeddings: false },
      vision_config: { depth: 2, model_type: 'qwen3_5' },
      image_token_id: 248056,
    });
    expect(cfg.modelType).toBe('qwen3_5');
    expect(cfg.tieWordEmbeddings).toBe(true); // the top-level flag wins
    expect(cfg.rope).toEqual({ type: 'default', theta: 10000000 });
    expect(cfg.qwen35).toEqual({
      layerTypes: TEXT.layer_types,
      partialRotaryFactor: 0.25,
      rotaryDim: 4,
      mropeSection: [1, 1, 0],
      linear: { numKeyHeads: 2, numValueHeads: 4, keyHeadDim: 8, valueHeadDim: 8, convKernelDim: 4 },
    });
  });

  it('parses a flat qwen3_5_text config and derives layer_types from full_attention_interval', () => {
    const { layer_types: _lt, ...flat } = TEXT;
    const cfg = parseModelConfig({ ...flat, full_attention_interval: 2 });
    expect(cfg.qwen35!.layerTypes).toEqual(['linear_attention', 'full_attention', 'linear_attention', 'full_attention']);
    const dflt = parseModelConfig({ ...flat, num_hidden_layers: 8 });
    expect(dflt.qwen35!.layerTypes.map((t) => t[0])).toEqual(['l', 'l', 'l', 'f', 'l', 'l', 'l', 'f']);
  });

  it('round-trips through toHFConfig', () => {
    const cfg = parseModelConfig(TEXT);
    expect(parseModelConfig(toHFConfig(cfg))).toEqual(cfg);
  });

  it('names the field of every bad value', () => {
    expect(configError(() => parseModelConfig({ ...TEXT, layer_types: ['linear_attention'] })).message).toMatch(
      /layer_types.*1 entries.*num_hidden_layers is 4/,
    );
    expect(configError(() => parseModelConfig({ ...TEXT, layer_types: ['linear_attention', 'sliding', 'x', 'full_attention'] })).message).toMatch(
      /layer_types\[1\] is "sliding"/,
    );
    expect(configError(() => parseModelConfig({ ...TEXT, linear_num_value_heads: 3 })).message).toMatch(
      /linear_num_value_heads \(3\).*linear_num_key_heads \(2\)/,
    );
    expect(configError(() => parseModelConfig({ ...TEXT, linear_key_head_dim: 0 })).message).toMatch(/"linear_key_head_dim" is 0/);
    expect(configError(() => parseModelConfig({ ...TEXT, attn_output_gate: false })).message).toMatch(/attn_output_gate/);
    expect(configError(() => parseModelConfig({ ...TEXT, rope_parameters: { ...TEXT.rope_parameters, partial_rotary_factor: 1.5 } })).message).toMatch(
      /partial_rotary_factor.*\(0, 1\]/,
    );
    expect(configError(() => parseModelConfig({ ...TEXT, rope_parameters: { ...TEXT.rope_parameters, rope_type: 'yarn', factor: 2 } })).message).toMatch(
      /rope type "yarn" is not supported for qwen3_5/,
    );
    expect(configError(() => parseModelConfig({ ...TEXT, num_experts: 8 })).message).toMatch(/"num_experts".*qwen3_5_moe/);
    expect(configError(() => parseModelConfig({ model_type: 'qwen3_5', text_config: 3 })).message).toMatch(/text_config/);
  });

  it('refuses qwen3_5_moe with a "not yet" message', () => {
    const e = configError(() => parseModelConfig({ ...TEXT, model_type: 'qwen3_5_moe' }));
    expect(e.message).toMatch(/qwen3_5_moe" is not supported yet/);
    expect(e.message).toMatch(/HINT/);
  });
});

describe('qwen3_5 parameters', () => {
  const cfg = parseModelConfig(TEXT);

  it('names and shapes as the transformers module tree', () => {
    const specs = new Map(paramSpecs(cfg).map((s) => [s.name, s.shape]));
    expect(specs.get('model.layers.0.linear_attn.in_proj_qkv.weight')).toEqual([2 * 2 * 8 + 4 * 8, 32]);
    expect(specs.get('model.layers.0.linear_attn.in_proj_z.weight')).toEqual([32, 32]);
    expect(specs.get('model.layers.0.linear_attn.in_proj_b.weight')).toEqual([4, 32]);
    expect(specs.get('model.layers.0.linear_attn.in_proj_a.weight')).toEqual([4, 32]);
    expect(specs.get('model.layers.0.linear_attn.conv1d.weight')).toEqual([64, 1, 4]);
    expect(specs.get('model.layers.0.linear_attn.A_log')).toEqual([4]);
    expect(specs.get('model.layers.0.linear_attn.dt_bias')).toEqual([4]);
    expect(specs.get('model.layers.0.linear_attn.norm.weight')).toEqual([8]);
    expect(specs.get('model.layers.0.linear_attn.out_proj.weight')).toEqual([32, 32]);
    expect(specs.has('model.layers.0.self_attn.q_proj.weight')).toBe(false);
    expect(specs.get('model.layers.3.self_attn.q_proj.weight')).toEqual([2 * 4 * 16, 32]);
    expect(specs.get('model.layers.3.self_attn.k_proj.weight')).toEqual([2 * 16, 32]);
    expect(specs.get('model.layers.3.self_attn.q_norm.weight')).toEqual([16]);
    expect(specs.has('model.layers.3.linear_attn.A_log')).toBe(false);
    expect(specs.get('lm_head.weight')).toEqual([40, 32]);
    expect(specs.size).toBe(1 + 3 * 14 + 11 + 2);
  });

  it('initialises centred norms to 0, the gated norm and dt_bias to 1, A_log to log(0.01..16)', () => {
    const p = initParams(cfg, 7);
    expect([...p.get('model.layers.3.self_attn.q_norm.weight')!.data]).toEqual(new Array(16).fill(0));
    expect([...p.get('model.norm.weight')!.data]).toEqual(new Array(32).fill(0));
    expect([...p.get('model.layers.0.linear_attn.norm.weight')!.data]).toEqual(new Array(8).fill(1));
    expect([...p.get('model.layers.0.linear_attn.dt_bias')!.data]).toEqual(new Array(4).fill(1));
    for (const v of p.get('model.layers.0.linear_attn.A_log')!.data) expect(v >= Math.log(0.01) && v <= Math.log(16)).toBe(true);
  });

  it('loads the text model of a ForConditionalGeneration checkpoint, skipping vision and MTP with a log line', () => {
    const names = paramSpecs(cfg).map((s) => s.name);
    const hub = new Map<string, number>(names.map((n, i) => [n.startsWith('model.') ? `model.language_model.${n.slice(6)}` : n, i]));
    hub.set('model.visual.blocks.0.attn.qkv.weight', -1).set('mtp.fc.weight', -2).set('mtp.layers.0.mlp.up_proj.weight', -3);
    const lines: string[] = [];
    const text = textOnlyWeights(hub, (l) => lines.push(l));
    expect([...text.keys()].sort()).toEqual([...names].sort());
    expect(lines).toEqual([
      'qwen3_5: loading the text model only; skipped 1 model.visual.* tensor and 2 mtp.* tensors (vision tower / multi-token prediction head).',
    ]);
    const shapes = paramSpecs(cfg).map((s) => ({ name: s.name.replace(/^model\./, 'model.language_model.'), shape: s.shape }));
    expect(checkParamsAgainstConfig(shapes, cfg)).toBeNull();
    expect(() =>
      textOnlyWeights(
        new Map([
          ['model.norm.weight', 1],
          ['model.language_model.norm.weight', 2],
        ]),
      ),
    ).toThrow(CheckpointFormatError);
  });
});

describe('qwen3_5 outside the single strategy', () => {
  const cfg = parseModelConfig(TEXT);
  const msg = /qwen3_5 trains on the single strategy only in this build; fsdp2 \/ megatron \/ the rollout engine do not support it yet/;

  it('the check passes Qwen3 and refuses Qwen3.5', () => {
    expect(() =>
      assertSingleStrategyModel(parseModelConfig({ ...TEXT, model_type: 'qwen3', layer_types: undefined, rope_parameters: { rope_theta: 1e6 } }), 'x'),
    ).not.toThrow();
    expect(() => assertSingleStrategyModel(cfg, 'x')).toThrow(msg);
  });

  it('the rollout engine, fsdp2, megatron and server weight sync refuse it at creation', async () => {
    expect(() => RolloutEngine.create(cfg, { device: Device.get(0) })).toThrow(msg);
    await expect(Fsdp2Strategy.create({ comm: { size: 1, rank: 0 } as never, cfg, params: new Map() })).rejects.toThrow(msg);
    await expect(MegatronStrategy.create({ comm: { size: 1, rank: 0 } as never, cfg, params: new Map(), tp: 1, dp: 1, ep: 1 })).rejects.toThrow(msg);
    expect(() => ServerSync.create({ comm: { size: 2, rank: 0 } as never, role: 'trainer', trainerRanks: [0], cfg })).toThrow(msg);
  });
});
