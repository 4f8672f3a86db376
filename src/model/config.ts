/**
 * HF `config.json` of Qwen3 (`qwen3`), Qwen3-MoE (`qwen3_moe`), Qwen3.5 (`qwen3_5`,
 * `qwen3_5_text`; see config-qwen35.ts) and Qwen3.5-MoE (`qwen3_5_moe`, `qwen3_5_moe_text`; see
 * config-qwen35-moe.ts) models, parsed into one normalised camelCase `ModelConfig`.
 *
 * Invariants of a `ModelConfig` (checked here, relied on by params, kernels and loaders):
 * - every size is a positive safe integer; `numHeads % numKvHeads === 0`; `headDim` is even;
 * - `rope` is the Transformers-5 form whatever the input used (`rope_scaling`, `rope_parameters`,
 *   top-level `rope_theta`), and when several forms are present they agree;
 * - `moe` is present iff `modelType` is `qwen3_moe` or `qwen3_5_moe`; `moe.mlpOnlyLayers` is sorted,
 *   unique and every index is a layer of the model; `moe.topK <= moe.numExperts`;
 *   `moe.sharedExpertIntermediateSize` is present iff `modelType === 'qwen3_5_moe'`;
 * - `qwen35` is present iff `modelType` is `qwen3_5` or `qwen3_5_moe` (isQwen35).
 * Unknown extra HF fields are accepted and dropped (real configs carry many).
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { ConfigError, InvalidArgumentError } from '../runtime/errors.js';
import { describe } from '../runtime/device/dtype.js';
import { parseQwen35, qwen35Family, qwen35HFFields, qwen35TextView, type Qwen35Config, type Qwen35Raw } from './config-qwen35.js';
import { parseQwen35Moe, qwen35MoeHFFields } from './config-qwen35-moe.js';
import { parseRouterAuxLoss, routerAuxHFFields } from './router-aux-config.js';

export const MODEL_TYPES = ['qwen3', 'qwen3_moe', 'qwen3_5', 'qwen3_5_moe'] as const;
/** model_type values accepted in config.json (`qwen3_5_text` / `qwen3_5_moe_text` are the text configs). */
const ACCEPTED_TYPES = [...MODEL_TYPES, 'qwen3_5_text', 'qwen3_5_moe_text'];
export type ModelType = (typeof MODEL_TYPES)[number];

export const ROPE_TYPES = ['default', 'linear', 'dynamic', 'yarn', 'llama3'] as const;
export type RopeType = (typeof ROPE_TYPES)[number];

export interface RopeConfig {
  type: RopeType;
  theta: number;
  factor?: number;
  originalMaxPositionEmbeddings?: number;
  attentionFactor?: number;
  betaFast?: number;
  betaSlow?: number;
  lowFreqFactor?: number;
  highFreqFactor?: number;
  /** yarn: floor / ceil the correction range (HF default true). */
  truncate?: boolean;
}

export interface MoeConfig {
  numExperts: number;
  /** Experts per token (`num_experts_per_tok`). */
  topK: number;
  /** Per-expert intermediate size (`moe_intermediate_size`). */
  intermediateSize: number;
  /** Renormalise the top-k router probabilities to sum to one. */
  normTopkProb: boolean;
  decoderSparseStep: number;
  /** Layers that use the dense MLP; sorted, unique, in [0, numLayers). */
  mlpOnlyLayers: number[];
  /** Qwen3.5-MoE: intermediate size of the shared expert every token also goes through. */
  sharedExpertIntermediateSize?: number;
  /**
   * Present iff `output_router_logits` is true: training adds this coefficient times the router
   * load-balancing loss (`router_aux_loss_coef`, router-aux-config.ts / router-aux-loss.ts).
   */
  routerAuxLossCoef?: number;
}

export interface ModelConfig {
  modelType: ModelType;
  hiddenSize: number;
  /**
   * Dense MLP intermediate size (dense layers of a MoE model use it too). Qwen3.5-MoE has no
   * dense MLP and HF drops the field; when config.json lacks it, it holds the shared expert's size.
   */
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  rmsNormEps: number;
  rope: RopeConfig;
  vocabSize: number;
  tieWordEmbeddings: boolean;
  maxPositionEmbeddings?: number;
  moe?: MoeConfig;
  /** Qwen3.5 / Qwen3.5-MoE: layer types, Gated DeltaNet sizes, partial rotary. */
  qwen35?: Qwen35Config;
}

/** The model is a Qwen3.5 decoder (dense or MoE): GDN and gated-attention layers, Qwen35Model. */
export const isQwen35 = (cfg: ModelConfig): boolean => cfg.qwen35 !== undefined;

// What each field must be, in words, for messages ("expected a positive integer").
const EXPECTED: Record<string, string> = {};

function field<T extends z.ZodType>(name: string, expected: string, schema: T): T {
  EXPECTED[name] = expected;
  return schema;
}

const posInt = (name: string) => field(name, 'a positive integer', z.number().int().positive().max(Number.MAX_SAFE_INTEGER));
const posNum = (name: string) => field(name, 'a positive finite number', z.number().positive().finite());

const ropeDict = z.looseObject({
  rope_type: field('rope_type', `one of ${ROPE_TYPES.join(', ')}`, z.string().optional()),
  type: field('type', `one of ${ROPE_TYPES.join(', ')}`, z.string().optional()),
  rope_theta: posNum('rope_theta').optional(),
  factor: posNum('factor').optional(),
  original_max_position_embeddings: posInt('original_max_position_embeddings').optional(),
  attention_factor: posNum('attention_factor').optional(),
  beta_fast: posNum('beta_fast').optional(),
  beta_slow: posNum('beta_slow').optional(),
  low_freq_factor: posNum('low_freq_factor').optional(),
  high_freq_factor: posNum('high_freq_factor').optional(),
  truncate: field('truncate', 'a boolean', z.boolean()).optional(),
});
EXPECTED.rope_parameters = 'an object such as {"rope_type": "default", "rope_theta": 1000000}';
EXPECTED.rope_scaling = 'an object such as {"rope_type": "yarn", "factor": 4} or null';

const ROPE_KEYS = new Set(Object.keys(ropeDict.shape));

const baseSchema = z.looseObject({
  model_type: z.string(),
  hidden_size: posInt('hidden_size'),
  intermediate_size: posInt('intermediate_size'),
  num_hidden_layers: posInt('num_hidden_layers'),
  num_attention_heads: posInt('num_attention_heads'),
  num_key_value_heads: posInt('num_key_value_heads').nullable().optional(),
  head_dim: posInt('head_dim').nullable().optional(),
  rms_norm_eps: posNum('rms_norm_eps'),
  rope_theta: posNum('rope_theta').optional(),
  rope_parameters: ropeDict.nullable().optional(),
  rope_scaling: ropeDict.nullable().optional(),
  vocab_size: posInt('vocab_size'),
  tie_word_embeddings: field('tie_word_embeddings', 'a boolean', z.boolean()).optional(),
  max_position_embeddings: posInt('max_position_embeddings').nullable().optional(),
  hidden_act: field('hidden_act', '"silu" (the only activation Qwen3 uses)', z.literal('silu')).optional(),
  attention_bias: field('attention_bias', 'false (Qwen3 attention has no bias)', z.literal(false)).optional(),
  use_sliding_window: field('use_sliding_window', 'false (sliding-window attention is not supported)', z.literal(false)).optional(),
});

const moeSchema = z.looseObject({
  num_experts: posInt('num_experts'),
  num_experts_per_tok: posInt('num_experts_per_tok'),
  moe_intermediate_size: posInt('moe_intermediate_size'),
  norm_topk_prob: field('norm_topk_prob', 'a boolean', z.boolean()).optional(),
  decoder_sparse_step: posInt('decoder_sparse_step').optional(),
  mlp_only_layers: field('mlp_only_layers', 'a list of layer indices (integers)', z.array(z.number().int())).nullable().optional(),
});

/** Parses an already-decoded config.json object. `source` names it in messages. */
export function parseModelConfig(raw: unknown, source = 'config.json'): ModelConfig {
  const fail = (msg: string, details: Record<string, unknown> = {}): never => {
    throw new ConfigError(`${source}: ${msg}`, { source, ...details });
  };
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    fail(`expected a JSON object but found ${describe(raw)}.`);
  }
  let obj = raw as Record<string, unknown>;
  let modelType = obj.model_type;
  if (modelType === undefined) fail(`field "model_type" is missing; expected one of ${ACCEPTED_TYPES.join(', ')}.`, { field: 'model_type' });
  if (!(ACCEPTED_TYPES as readonly unknown[]).includes(modelType)) {
    fail(`model_type ${JSON.stringify(modelType)} is not supported; expected one of ${ACCEPTED_TYPES.join(', ')}.`, { field: 'model_type' });
  }
  let q35: Qwen35Raw | undefined;
  let q35Moe: MoeConfig | undefined;
  if (qwen35Family(modelType)) {
    q35 = qwen35TextView(obj, fail);
    obj = q35.text;
    modelType = obj.model_type;
    if (modelType === 'qwen3_5_moe') {
      q35Moe = parseQwen35Moe(obj, fail);
      if (obj.intermediate_size === undefined) obj = { ...obj, intermediate_size: q35Moe.sharedExpertIntermediateSize };
    }
  }
  const isMoe = modelType === 'qwen3_moe';
  const base = check(baseSchema, obj, source);
  const moeRaw = isMoe ? check(moeSchema, obj, source) : undefined;
  const auxCoef = isMoe ? parseRouterAuxLoss(obj, 'qwen3_moe', fail) : undefined;

  const numHeads = base.num_attention_heads;
  const numKvHeads = base.num_key_value_heads ?? numHeads; // HF default: no GQA
  if (numHeads % numKvHeads !== 0) {
    fail(`num_attention_heads (${numHeads}) is not a multiple of num_key_value_heads (${numKvHeads}); grouped-query attention needs whole groups.`);
  }
  let headDim = base.head_dim ?? undefined;
  if (headDim === undefined) {
    if (base.hidden_size % numHeads !== 0) {
      fail(`head_dim is absent and hidden_size (${base.hidden_size}) is not divisible by num_attention_heads (${numHeads}). HINT: set "head_dim" explicitly.`);
    }
    headDim = base.hidden_size / numHeads;
  }
  if (headDim % 2 !== 0) fail(`head_dim is ${headDim}; expected an even number (RoPE rotates pairs).`, { field: 'head_dim' });

  const cfg: ModelConfig = {
    modelType: modelType as ModelType,
    hiddenSize: base.hidden_size,
    intermediateSize: base.intermediate_size,
    numLayers: base.num_hidden_layers,
    numHeads,
    numKvHeads,
    headDim,
    rmsNormEps: base.rms_norm_eps,
    rope: normaliseRope(base, fail),
    vocabSize: base.vocab_size,
    tieWordEmbeddings: base.tie_word_embeddings ?? false,
  };
  if (base.max_position_embeddings != null) cfg.maxPositionEmbeddings = base.max_position_embeddings;
  if (q35) cfg.qwen35 = parseQwen35(q35, cfg.numLayers, headDim, fail);
  if (q35Moe) cfg.moe = q35Moe;

  if (moeRaw) {
    if (moeRaw.num_experts_per_tok > moeRaw.num_experts) {
      fail(`num_experts_per_tok (${moeRaw.num_experts_per_tok}) is greater than num_experts (${moeRaw.num_experts}); expected at most num_experts.`);
    }
    const layers = [...new Set(moeRaw.mlp_only_layers ?? [])].sort((a, b) => a - b);
    for (const i of layers) {
      if (i < 0 || i >= cfg.numLayers) {
        fail(`mlp_only_layers contains ${i}; expected layer indices in [0, ${cfg.numLayers}) (num_hidden_layers is ${cfg.numLayers}).`, {
          field: 'mlp_only_layers',
        });
      }
    }
    cfg.moe = {
      numExperts: moeRaw.num_experts,
      topK: moeRaw.num_experts_per_tok,
      intermediateSize: moeRaw.moe_intermediate_size,
      normTopkProb: moeRaw.norm_topk_prob ?? false,
      decoderSparseStep: moeRaw.decoder_sparse_step ?? 1,
      mlpOnlyLayers: layers,
      ...(auxCoef !== undefined ? { routerAuxLossCoef: auxCoef } : {}),
    };
  }
  return cfg;
}

/** Reads and parses a config.json file (or the config.json inside a folder's path given explicitly). */
export function loadModelConfig(path: string): ModelConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`${path}: cannot read the model config (${(err as Error).message}).`, { source: path }, { cause: err });
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new ConfigError(`${path}: not valid JSON (${(err as Error).message}).`, { source: path }, { cause: err });
  }
  return parseModelConfig(raw, path);
}

/**
 * Layer `i` uses the sparse MoE block (HF Qwen3-MoE semantics): the model is MoE, `i` is not in
 * `mlp_only_layers`, `num_experts > 0` and `(i + 1) % decoder_sparse_step === 0`.
 */
export function isMoeLayer(cfg: ModelConfig, i: number): boolean {
  if (!Number.isInteger(i) || i < 0 || i >= cfg.numLayers) {
    throw new InvalidArgumentError(`Expected a layer index in [0, ${cfg.numLayers}) but received ${describe(i)}.`, { argument: 'layer', value: i });
  }
  const moe = cfg.moe;
  if (!moe) return false;
  return !moe.mlpOnlyLayers.includes(i) && moe.numExperts > 0 && (i + 1) % moe.decoderSparseStep === 0;
}

/**
 * The HF config.json object for `cfg`. Rope is written in the Transformers-5 form
 * (`rope_parameters`), plus the top-level `rope_theta` and, when scaled, the legacy
 * `rope_scaling` so Transformers-4 readers see the same rope. `parseModelConfig(toHFConfig(c))`
 * equals `c`.
 */
export function toHFConfig(cfg: ModelConfig): Record<string, unknown> {
  const rope: Record<string, unknown> = { rope_type: cfg.rope.type, rope_theta: cfg.rope.theta };
  const q35 = cfg.qwen35 && qwen35HFFields(cfg.qwen35);
  if (q35) Object.assign(rope, q35.rope);
  for (const [camel, snake] of ROPE_FIELD_NAMES) {
    const v = cfg.rope[camel];
    if (v !== undefined) rope[snake] = v;
  }
  const out: Record<string, unknown> = {
    architectures: [ARCHITECTURES[cfg.modelType]],
    model_type: q35 ? `${cfg.modelType}_text` : cfg.modelType,
    hidden_size: cfg.hiddenSize,
    intermediate_size: cfg.intermediateSize,
    num_hidden_layers: cfg.numLayers,
    num_attention_heads: cfg.numHeads,
    num_key_value_heads: cfg.numKvHeads,
    head_dim: cfg.headDim,
    hidden_act: 'silu',
    attention_bias: false,
    rms_norm_eps: cfg.rmsNormEps,
    rope_theta: cfg.rope.theta,
    rope_parameters: rope,
    vocab_size: cfg.vocabSize,
    tie_word_embeddings: cfg.tieWordEmbeddings,
  };
  if (cfg.rope.type !== 'default') {
    const { rope_theta: _theta, ...scaling } = rope;
    out.rope_scaling = scaling;
  }
  if (cfg.maxPositionEmbeddings !== undefined) out.max_position_embeddings = cfg.maxPositionEmbeddings;
  if (q35) Object.assign(out, q35.fields);
  if (cfg.moe?.sharedExpertIntermediateSize !== undefined) {
    Object.assign(out, qwen35MoeHFFields(cfg.moe));
    // HF's Qwen3_5MoeTextConfig has no intermediate_size: written only when it is not the shared-expert stand-in.
    if (cfg.intermediateSize === cfg.moe.sharedExpertIntermediateSize) delete out.intermediate_size;
  } else if (cfg.moe) {
    out.num_experts = cfg.moe.numExperts;
    out.num_experts_per_tok = cfg.moe.topK;
    out.moe_intermediate_size = cfg.moe.intermediateSize;
    out.norm_topk_prob = cfg.moe.normTopkProb;
    out.decoder_sparse_step = cfg.moe.decoderSparseStep;
    out.mlp_only_layers = [...cfg.moe.mlpOnlyLayers];
  }
  if (cfg.moe) Object.assign(out, routerAuxHFFields(cfg.moe.routerAuxLossCoef));
  return out;
}

const ARCHITECTURES: Record<ModelType, string> = {
  qwen3: 'Qwen3ForCausalLM',
  qwen3_moe: 'Qwen3MoeForCausalLM',
  qwen3_5: 'Qwen3_5ForCausalLM',
  qwen3_5_moe: 'Qwen3_5MoeForCausalLM',
};

const ROPE_FIELD_NAMES: ReadonlyArray<[Exclude<keyof RopeConfig, 'type' | 'theta'>, string]> = [
  ['factor', 'factor'],
  ['originalMaxPositionEmbeddings', 'original_max_position_embeddings'],
  ['attentionFactor', 'attention_factor'],
  ['betaFast', 'beta_fast'],
  ['betaSlow', 'beta_slow'],
  ['lowFreqFactor', 'low_freq_factor'],
  ['highFreqFactor', 'high_freq_factor'],
  ['truncate', 'truncate'],
];

type RopeDict = z.infer<typeof ropeDict>;

function normaliseRope(base: z.infer<typeof baseSchema>, fail: (msg: string) => never): RopeConfig {
  // Collect every statement of each rope key from the three places it may live; they must agree.
  const seen = new Map<string, { value: unknown; where: string }>();
  const put = (key: string, value: unknown, where: string) => {
    if (value === undefined || value === null) return;
    const prev = seen.get(key);
    if (prev && prev.value !== value) {
      fail(
        `${prev.where} says ${key}=${JSON.stringify(prev.value)} but ${where} says ${JSON.stringify(value)}; expected them to agree. HINT: keep only "rope_parameters".`,
      );
    }
    if (!prev) seen.set(key, { value, where });
  };
  const take = (dict: RopeDict | null | undefined, where: string) => {
    if (!dict) return;
    for (const key of Object.keys(dict)) {
      if (!ROPE_KEYS.has(key)) {
        fail(`${where}.${key} is not a supported rope parameter; expected only ${[...ROPE_KEYS].join(', ')}.`);
      }
    }
    if (dict.rope_type !== undefined && dict.type !== undefined && dict.rope_type !== dict.type) {
      fail(`${where} has rope_type "${dict.rope_type}" and type "${dict.type}"; expected one rope type.`);
    }
    put('rope_type', dict.rope_type ?? dict.type, where);
    for (const [, snake] of ROPE_FIELD_NAMES) put(snake, dict[snake as keyof RopeDict], where);
    put('rope_theta', dict.rope_theta, where);
  };
  take(base.rope_parameters, 'rope_parameters');
  take(base.rope_scaling, 'rope_scaling');
  put('rope_theta', base.rope_theta, 'rope_theta');

  const get = <T>(key: string) => seen.get(key)?.value as T | undefined;
  const type = get<string>('rope_type') ?? 'default';
  if (!(ROPE_TYPES as readonly string[]).includes(type)) {
    fail(`rope type ${JSON.stringify(type)} is not supported; expected one of ${ROPE_TYPES.join(', ')}.`);
  }
  // HF default for Qwen3 when no rope_theta is given anywhere.
  const rope: RopeConfig = { type: type as RopeType, theta: get<number>('rope_theta') ?? 10000 };
  for (const [camel, snake] of ROPE_FIELD_NAMES) {
    const v = get<number | boolean>(snake);
    if (v !== undefined) (rope as unknown as Record<string, unknown>)[camel] = v;
  }
  if (type !== 'default') {
    if (rope.factor === undefined) fail(`rope type "${type}" needs "factor"; expected a number >= 1 in rope_parameters.`);
    if (rope.factor! < 1) fail(`rope factor is ${rope.factor}; expected a number >= 1.`);
  }
  if (type === 'llama3') {
    for (const key of ['low_freq_factor', 'high_freq_factor', 'original_max_position_embeddings']) {
      if (get(key) === undefined) fail(`rope type "llama3" needs "${key}" in rope_parameters; it is missing.`);
    }
  }
  // dynamic scales beyond, and yarn's correction range is measured over, the original context.
  if ((type === 'dynamic' || type === 'yarn') && rope.originalMaxPositionEmbeddings === undefined && typeof base.max_position_embeddings !== 'number') {
    fail(
      `rope type "${type}" needs "original_max_position_embeddings" in rope_parameters or a top-level "max_position_embeddings"; both are missing. HINT: Qwen3's long-context recipe writes "original_max_position_embeddings": 32768.`,
    );
  }
  return rope;
}

function check<S extends z.ZodType>(schema: S, obj: unknown, source: string): z.infer<S> {
  const r = schema.safeParse(obj);
  if (r.success) return r.data;
  const problems = r.error.issues.map((issue) => {
    const path = issue.path.map(String);
    const name = path.join('.');
    const expected = EXPECTED[path[path.length - 1] ?? ''] ?? issue.message;
    const found = valueAt(obj, issue.path);
    if (found === undefined) return `field "${name}" is missing; expected ${expected}.`;
    return `field "${name}" is ${describe(found)}; expected ${expected}.`;
  });
  throw new ConfigError(`${source}: ${problems.join(' ')}`, { source, fields: r.error.issues.map((i) => i.path.join('.')) });
}

function valueAt(obj: unknown, path: ReadonlyArray<PropertyKey>): unknown {
  let cur: unknown = obj;
  for (const key of path) {
    if (typeof cur !== 'object' || cur === null) return undefined;
    cur = (cur as Record<PropertyKey, unknown>)[key];
  }
  return cur;
}
