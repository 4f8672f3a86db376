import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { ConfigError } from '../src/runtime/errors.js';
import { isMoeLayer, loadModelConfig, parseModelConfig, toHFConfig, type ModelConfig } from '../src/model/config.js';

const DENSE = 'examples/models/tiny-dense/config.json';
const MOE = 'examples/models/tiny-moe/config.json';
const raw = (path: string): Record<string, unknown> => JSON.parse(readFileSync(path, 'utf8'));

function errorOf(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).code).toBe('ASCENT_CONFIG');
    return err as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('shipped tiny configs', () => {
  it('dense: legacy rope_theta form, tied embeddings, extras ignored', () => {
    const cfg = loadModelConfig(DENSE);
    expect(cfg).toEqual({
      modelType: 'qwen3',
      hiddenSize: 128,
      intermediateSize: 384,
      numLayers: 2,
      numHeads: 4,
      numKvHeads: 2,
      headDim: 32,
      rmsNormEps: 1e-6,
      rope: { type: 'default', theta: 10000 },
      vocabSize: 64,
      tieWordEmbeddings: true,
      maxPositionEmbeddings: 128,
    } satisfies ModelConfig);
    expect(isMoeLayer(cfg, 0)).toBe(false);
  });

  it('moe: rope_parameters form and moe block', () => {
    const cfg = loadModelConfig(MOE);
    expect(cfg.modelType).toBe('qwen3_moe');
    expect(cfg.rope).toEqual({ type: 'default', theta: 10000 });
    expect(cfg.tieWordEmbeddings).toBe(false);
    expect(cfg.moe).toEqual({ numExperts: 8, topK: 2, intermediateSize: 128, normTopkProb: true, decoderSparseStep: 1, mlpOnlyLayers: [] });
    expect([0, 1].map((i) => isMoeLayer(cfg, i))).toEqual([true, true]);
  });

  it('toHFConfig round-trips both configs', () => {
    for (const path of [DENSE, MOE]) {
      const cfg = loadModelConfig(path);
      const hf = toHFConfig(cfg);
      expect(parseModelConfig(JSON.parse(JSON.stringify(hf)))).toEqual(cfg);
    }
  });
});

describe('defaults and legacy forms', () => {
  it('head_dim defaults to hidden / heads; num_key_value_heads to heads; tie to false', () => {
    const r = raw(DENSE);
    delete r.head_dim;
    delete r.num_key_value_heads;
    delete r.tie_word_embeddings;
    const cfg = parseModelConfig(r);
    expect(cfg.headDim).toBe(32);
    expect(cfg.numKvHeads).toBe(4);
    expect(cfg.tieWordEmbeddings).toBe(false);
  });

  it('head_dim absent and hidden not divisible by heads names both', () => {
    const r = { ...raw(DENSE), hidden_size: 130 };
    delete r.head_dim;
    expect(errorOf(() => parseModelConfig(r)).message).toMatch(/head_dim is absent and hidden_size \(130\) is not divisible by num_attention_heads \(4\)/);
  });

  it('legacy rope_scaling (with "type") is folded into the Transformers-5 rope', () => {
    const r = { ...raw(DENSE), rope_theta: 1e6, rope_scaling: { type: 'yarn', factor: 4, original_max_position_embeddings: 32768 } };
    const cfg = parseModelConfig(r);
    expect(cfg.rope).toEqual({ type: 'yarn', theta: 1e6, factor: 4, originalMaxPositionEmbeddings: 32768 });
    const hf = toHFConfig(cfg);
    expect(hf.rope_parameters).toEqual({ rope_type: 'yarn', rope_theta: 1e6, factor: 4, original_max_position_embeddings: 32768 });
    expect(hf.rope_scaling).toEqual({ rope_type: 'yarn', factor: 4, original_max_position_embeddings: 32768 });
    expect(parseModelConfig(hf)).toEqual(cfg);
  });

  it('rope_theta defaults to 10000 when given nowhere', () => {
    const r = raw(DENSE);
    delete r.rope_theta;
    expect(parseModelConfig(r).rope).toEqual({ type: 'default', theta: 10000 });
  });

  it('disagreeing rope forms are an error naming both', () => {
    const r = { ...raw(MOE), rope_theta: 5000 };
    expect(errorOf(() => parseModelConfig(r)).message).toMatch(/rope_parameters says rope_theta=10000 but rope_theta says 5000/);
  });

  it('unknown rope type, unknown rope key and missing factor are errors', () => {
    expect(errorOf(() => parseModelConfig({ ...raw(DENSE), rope_scaling: { rope_type: 'longrope', factor: 2 } })).message).toMatch(
      /rope type "longrope" is not supported; expected one of default, linear, dynamic, yarn, llama3/,
    );
    expect(errorOf(() => parseModelConfig({ ...raw(DENSE), rope_scaling: { rope_type: 'linear', factr: 2 } })).message).toMatch(
      /rope_scaling\.factr is not a supported rope parameter/,
    );
    expect(errorOf(() => parseModelConfig({ ...raw(DENSE), rope_scaling: { rope_type: 'linear' } })).message).toMatch(/rope type "linear" needs "factor"/);
    expect(errorOf(() => parseModelConfig({ ...raw(DENSE), rope_scaling: { rope_type: 'llama3', factor: 8 } })).message).toMatch(
      /llama3" needs "low_freq_factor"/,
    );
  });

  it('mlp_only_layers: list with duplicates becomes a sorted unique set', () => {
    const r = { ...raw(MOE), num_hidden_layers: 4, mlp_only_layers: [3, 0, 3, 0] };
    const cfg = parseModelConfig(r);
    expect(cfg.moe!.mlpOnlyLayers).toEqual([0, 3]);
    expect([0, 1, 2, 3].map((i) => isMoeLayer(cfg, i))).toEqual([false, true, true, false]);
    expect(parseModelConfig(toHFConfig(cfg))).toEqual(cfg);
    expect(parseModelConfig({ ...raw(MOE), mlp_only_layers: null }).moe!.mlpOnlyLayers).toEqual([]);
  });

  it('mlp_only_layers index out of range names it and the range', () => {
    expect(errorOf(() => parseModelConfig({ ...raw(MOE), mlp_only_layers: [0, 2] })).message).toMatch(
      /mlp_only_layers contains 2; expected layer indices in \[0, 2\)/,
    );
    expect(errorOf(() => parseModelConfig({ ...raw(MOE), mlp_only_layers: [-1] })).message).toMatch(/contains -1/);
  });

  it('decoder_sparse_step follows HF semantics ((i + 1) % step == 0)', () => {
    const cfg = parseModelConfig({ ...raw(MOE), num_hidden_layers: 6, decoder_sparse_step: 2, mlp_only_layers: [3] });
    expect([0, 1, 2, 3, 4, 5].map((i) => isMoeLayer(cfg, i))).toEqual([false, true, false, false, false, true]);
    expect(() => isMoeLayer(cfg, 6)).toThrow(/layer index in \[0, 6\)/);
  });

  it('dense model ignores stray MoE fields', () => {
    const cfg = parseModelConfig({ ...raw(DENSE), num_experts: 8 });
    expect(cfg.moe).toBeUndefined();
  });
});

describe('errors say what was found and what was expected', () => {
  it('unknown model_type', () => {
    expect(errorOf(() => parseModelConfig({ ...raw(DENSE), model_type: 'llama' })).message).toBe(
      'config.json: model_type "llama" is not supported; expected one of qwen3, qwen3_moe, qwen3_5, qwen3_5_moe, qwen3_5_text, qwen3_5_moe_text.',
    );
    expect(errorOf(() => parseModelConfig({ hidden_size: 1 })).message).toMatch(/"model_type" is missing/);
    expect(errorOf(() => parseModelConfig([1, 2])).message).toMatch(/expected a JSON object but found an array/);
  });

  it('missing required field names it', () => {
    const r = raw(DENSE);
    delete r.vocab_size;
    expect(errorOf(() => parseModelConfig(r, 'x/config.json')).message).toBe('x/config.json: field "vocab_size" is missing; expected a positive integer.');
  });

  it('wrong types and values', () => {
    expect(errorOf(() => parseModelConfig({ ...raw(DENSE), hidden_size: -1 })).message).toMatch(
      /field "hidden_size" is -1 of type number; expected a positive integer/,
    );
    expect(errorOf(() => parseModelConfig({ ...raw(DENSE), rms_norm_eps: '1e-6' })).message).toMatch(
      /field "rms_norm_eps" is '1e-6' of type string; expected a positive finite number/,
    );
    expect(errorOf(() => parseModelConfig({ ...raw(DENSE), hidden_act: 'gelu' })).message).toMatch(/hidden_act.*expected "silu"/);
    expect(errorOf(() => parseModelConfig({ ...raw(DENSE), attention_bias: true })).message).toMatch(/attention_bias/);
  });

  it('missing MoE field and top-k above the expert count', () => {
    const r = raw(MOE);
    delete r.moe_intermediate_size;
    expect(errorOf(() => parseModelConfig(r)).message).toMatch(/field "moe_intermediate_size" is missing/);
    expect(errorOf(() => parseModelConfig({ ...raw(MOE), num_experts_per_tok: 9 })).message).toMatch(
      /num_experts_per_tok \(9\) is greater than num_experts \(8\)/,
    );
  });

  it('the router load-balancing loss: output_router_logits true keeps router_aux_loss_coef (default 0.001), false or absent none; bad values named', () => {
    const on = parseModelConfig({ ...raw(MOE), output_router_logits: true, router_aux_loss_coef: 0.02 });
    expect(on.moe?.routerAuxLossCoef).toBe(0.02);
    expect(parseModelConfig(toHFConfig(on)).moe?.routerAuxLossCoef).toBe(0.02);
    expect(parseModelConfig({ ...raw(MOE), output_router_logits: true }).moe?.routerAuxLossCoef).toBe(0.001);
    const off = parseModelConfig({ ...raw(MOE), output_router_logits: false, router_aux_loss_coef: 0.001 });
    expect(off.moe?.numExperts).toBe(8);
    expect(off.moe?.routerAuxLossCoef).toBeUndefined();
    expect(toHFConfig(off).output_router_logits).toBeUndefined();
    expect(errorOf(() => parseModelConfig({ ...raw(MOE), output_router_logits: 'yes' })).message).toMatch(
      /"output_router_logits" is "yes"; expected true or false for qwen3_moe\. HINT/,
    );
    expect(errorOf(() => parseModelConfig({ ...raw(MOE), output_router_logits: true, router_aux_loss_coef: -1 })).message).toMatch(
      /"router_aux_loss_coef" is -1; expected a finite number >= 0 .*HINT/,
    );
    // A dense config has no router: the field means nothing there.
    expect(parseModelConfig({ ...raw(DENSE), output_router_logits: true }).moe).toBeUndefined();
  });

  it('GQA needs whole groups; head_dim even', () => {
    expect(errorOf(() => parseModelConfig({ ...raw(DENSE), num_key_value_heads: 3 })).message).toMatch(/not a multiple of num_key_value_heads \(3\)/);
    expect(errorOf(() => parseModelConfig({ ...raw(DENSE), head_dim: 31 })).message).toMatch(/head_dim is 31; expected an even number/);
  });

  it('loadModelConfig names the file on bad JSON', () => {
    expect(errorOf(() => loadModelConfig('package.json')).message).toMatch(/package\.json: field "model_type" is missing/);
    expect(errorOf(() => loadModelConfig('README.md')).message).toMatch(/README\.md: not valid JSON/);
  });
});
