/**
 * The Qwen3.5 (`qwen3_5`, `qwen3_5_text`) part of a HF config.json, shared by Qwen3.5-MoE
 * (`qwen3_5_moe`, whose MoE fields config-qwen35-moe.ts parses): the text config (nested
 * under `text_config` in `Qwen3_5ForConditionalGeneration` checkpoints, flat otherwise), which
 * layers are Gated DeltaNet (`linear_attention`) and which are gated full attention, the
 * `linear_*` GDN sizes and the partial rotary factor. config.ts parses the fields Qwen3 shares.
 *
 * Qwen3.5 writes its rope as multimodal rope (`mrope_section`, `mrope_interleaved`); with text-only
 * positions all three sections see the same position, so it is plain RoPE over the first
 * `rotaryDim = headDim * partial_rotary_factor` channels of each head, which is what this build runs.
 * A scaled rope type (linear, dynamic, yarn, llama3) scales that plain rope, its table taken over
 * the rotary dim (rope-scaling.ts), as HF computes it with dim = head_dim * partial_rotary_factor.
 */
export const LAYER_TYPES = ['linear_attention', 'full_attention'] as const;
export type LayerType = (typeof LAYER_TYPES)[number];

export interface LinearAttentionConfig {
  /** `linear_num_key_heads` (q and k heads of the gated delta rule). */
  numKeyHeads: number;
  /** `linear_num_value_heads` (a multiple of numKeyHeads). */
  numValueHeads: number;
  keyHeadDim: number;
  valueHeadDim: number;
  /** `linear_conv_kernel_dim`: taps of the causal depthwise conv over q‖k‖v. */
  convKernelDim: number;
}

export interface Qwen35Config {
  /** One entry per decoder layer. */
  layerTypes: LayerType[];
  linear: LinearAttentionConfig;
  partialRotaryFactor: number;
  /** Rotated channels per head: headDim * partialRotaryFactor (even). */
  rotaryDim: number;
  /** `mrope_section` as written (kept so the config round-trips); unused for text-only positions. */
  mropeSection?: number[];
}

type Fail = (msg: string, details?: Record<string, unknown>) => never;

// Rope keys of Qwen3.5 that the shared rope parser does not know; taken out here.
const QWEN35_ROPE_KEYS = ['partial_rotary_factor', 'mrope_section', 'mrope_interleaved'] as const;

/** The raw Qwen3.5 text fields before their checks. */
export interface Qwen35Raw {
  text: Record<string, unknown>;
  rope: Record<string, unknown>;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The config.json model_type of each Qwen3.5 family, of its text config, and the ModelType it parses to. */
const FAMILIES = {
  qwen3_5: { text: 'qwen3_5_text', modelType: 'qwen3_5' },
  qwen3_5_moe: { text: 'qwen3_5_moe_text', modelType: 'qwen3_5_moe' },
} as const;

/** The Qwen3.5 family (dense or MoE) a config.json model_type belongs to, or undefined. */
export function qwen35Family(modelType: unknown): 'qwen3_5' | 'qwen3_5_moe' | undefined {
  for (const [family, f] of Object.entries(FAMILIES)) if (modelType === family || modelType === f.text) return family as 'qwen3_5' | 'qwen3_5_moe';
  return undefined;
}

/**
 * The text config of a Qwen3.5 (`qwen3_5`, `qwen3_5_text`) or Qwen3.5-MoE (`qwen3_5_moe`,
 * `qwen3_5_moe_text`) config.json, flat, as config.ts parses it: `model_type` set to the family
 * (`qwen3_5` / `qwen3_5_moe`), the Qwen3.5-only rope keys moved out of `rope_parameters` /
 * `rope_scaling` (returned in `rope`), and a top-level `tie_word_embeddings` taking precedence
 * over the nested one (the conditional-generation model ties its own LM head).
 */
export function qwen35TextView(obj: Record<string, unknown>, fail: Fail): Qwen35Raw {
  const family = qwen35Family(obj.model_type)!;
  const names = FAMILIES[family];
  let text: Record<string, unknown> = obj;
  if (obj.model_type === family && obj.text_config !== undefined && obj.text_config !== null) {
    if (!isObj(obj.text_config))
      fail(`field "text_config" is not an object; expected the text model's config (the ${names.text} fields).`, { field: 'text_config' });
    const nested = obj.text_config as Record<string, unknown>;
    if (nested.model_type !== undefined && nested.model_type !== names.text && nested.model_type !== family) {
      fail(`field "text_config.model_type" is ${JSON.stringify(nested.model_type)}; expected "${names.text}" under model_type "${family}".`, {
        field: 'text_config.model_type',
      });
    }
    text = { ...nested };
    if (obj.tie_word_embeddings !== undefined) text.tie_word_embeddings = obj.tie_word_embeddings;
  } else text = { ...obj };
  text.model_type = names.modelType;
  const rope: Record<string, unknown> = {};
  for (const where of ['rope_parameters', 'rope_scaling'] as const) {
    const dict = text[where];
    if (!isObj(dict)) continue;
    const rest = { ...dict };
    for (const key of QWEN35_ROPE_KEYS) {
      if (rest[key] === undefined) continue;
      if (rope[key] !== undefined && JSON.stringify(rope[key]) !== JSON.stringify(rest[key])) {
        fail(`rope_parameters and rope_scaling disagree on ${key}; expected them to agree. HINT: keep only "rope_parameters".`, { field: key });
      }
      rope[key] = rest[key];
      delete rest[key];
    }
    text[where] = rest;
  }
  if (text.partial_rotary_factor !== undefined) {
    if (rope.partial_rotary_factor !== undefined && rope.partial_rotary_factor !== text.partial_rotary_factor) {
      fail(
        `partial_rotary_factor is ${JSON.stringify(text.partial_rotary_factor)} at the top level but ${JSON.stringify(rope.partial_rotary_factor)} in rope_parameters; expected them to agree.`,
        { field: 'partial_rotary_factor' },
      );
    }
    rope.partial_rotary_factor = text.partial_rotary_factor;
  }
  return { text, rope };
}

const posInt = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v > 0;

/** The Qwen3.5 fields of a text config whose shared fields parsed to `numLayers` layers of `headDim`. */
export function parseQwen35(raw: Qwen35Raw, numLayers: number, headDim: number, fail: Fail): Qwen35Config {
  const t = raw.text;
  // The dense Qwen3.5 has no MoE field; one means a qwen3_5_moe checkpoint under the wrong model_type.
  for (const key of t.model_type === 'qwen3_5' ? ['num_experts', 'num_experts_per_tok', 'moe_intermediate_size', 'shared_expert_intermediate_size'] : []) {
    if (t[key] !== undefined && t[key] !== null && t[key] !== 0) {
      fail(
        `field "${key}" is set but model_type qwen3_5 is the dense Qwen3.5; expected no MoE fields. HINT: a Qwen3.5-MoE checkpoint says model_type "qwen3_5_moe".`,
        { field: key },
      );
    }
  }
  if (t.attn_output_gate !== undefined && t.attn_output_gate !== true) {
    fail(`field "attn_output_gate" is ${JSON.stringify(t.attn_output_gate)}; expected true (Qwen3.5 full attention always gates its output).`, {
      field: 'attn_output_gate',
    });
  }
  const sizes: Record<string, number> = {};
  const defaults: Record<string, number> = {
    linear_num_key_heads: 16,
    linear_num_value_heads: 32,
    linear_key_head_dim: 128,
    linear_value_head_dim: 128,
    linear_conv_kernel_dim: 4,
  };
  for (const [key, dflt] of Object.entries(defaults)) {
    const v = t[key] ?? dflt;
    if (!posInt(v)) fail(`field "${key}" is ${JSON.stringify(v)}; expected a positive integer.`, { field: key });
    sizes[key] = v as number;
  }
  const linear: LinearAttentionConfig = {
    numKeyHeads: sizes.linear_num_key_heads!,
    numValueHeads: sizes.linear_num_value_heads!,
    keyHeadDim: sizes.linear_key_head_dim!,
    valueHeadDim: sizes.linear_value_head_dim!,
    convKernelDim: sizes.linear_conv_kernel_dim!,
  };
  if (linear.numValueHeads % linear.numKeyHeads !== 0) {
    fail(
      `linear_num_value_heads (${linear.numValueHeads}) is not a multiple of linear_num_key_heads (${linear.numKeyHeads}); each key head must serve whole groups of value heads.`,
      { field: 'linear_num_value_heads' },
    );
  }

  const layerTypes = parseLayerTypes(t, numLayers, fail);

  const factor = raw.rope.partial_rotary_factor ?? 0.25; // HF default for Qwen3.5
  if (typeof factor !== 'number' || !(factor > 0 && factor <= 1)) {
    fail(`field "partial_rotary_factor" is ${JSON.stringify(factor)}; expected a number in (0, 1].`, { field: 'partial_rotary_factor' });
  }
  const rotaryDim = Math.trunc(headDim * (factor as number)); // HF: int(head_dim * partial_rotary_factor)
  if (rotaryDim < 2 || rotaryDim % 2 !== 0) {
    fail(`head_dim ${headDim} × partial_rotary_factor ${factor} gives ${rotaryDim} rotary channels; expected an even number >= 2 (RoPE rotates pairs).`, {
      field: 'partial_rotary_factor',
    });
  }
  const cfg: Qwen35Config = { layerTypes, linear, partialRotaryFactor: factor as number, rotaryDim };
  const section = raw.rope.mrope_section;
  if (section !== undefined) {
    if (!Array.isArray(section) || !section.every((x) => Number.isSafeInteger(x) && (x as number) >= 0)) {
      fail(`field "mrope_section" is ${JSON.stringify(section)}; expected a list of non-negative integers such as [11, 11, 10].`, { field: 'mrope_section' });
    }
    cfg.mropeSection = [...(section as number[])];
  }
  const interleaved = raw.rope.mrope_interleaved;
  if (interleaved !== undefined && typeof interleaved !== 'boolean') {
    fail(`field "mrope_interleaved" is ${JSON.stringify(interleaved)}; expected a boolean.`, { field: 'mrope_interleaved' });
  }
  return cfg;
}

function parseLayerTypes(t: Record<string, unknown>, numLayers: number, fail: Fail): LayerType[] {
  const lt = t.layer_types;
  if (lt === undefined || lt === null) {
    // HF: every full_attention_interval-th layer (1-based) is full attention, the rest GDN.
    const interval = t.full_attention_interval ?? 4;
    if (!posInt(interval))
      fail(`field "full_attention_interval" is ${JSON.stringify(interval)}; expected a positive integer.`, { field: 'full_attention_interval' });
    return Array.from({ length: numLayers }, (_, i) => ((i + 1) % (interval as number) === 0 ? 'full_attention' : 'linear_attention'));
  }
  if (!Array.isArray(lt))
    fail(`field "layer_types" is ${JSON.stringify(lt)}; expected a list of "linear_attention" / "full_attention", one per layer.`, { field: 'layer_types' });
  const list = lt as unknown[];
  if (list.length !== numLayers) {
    fail(`field "layer_types" has ${list.length} entries but num_hidden_layers is ${numLayers}; expected one entry per layer.`, { field: 'layer_types' });
  }
  list.forEach((x, i) => {
    if (!(LAYER_TYPES as readonly unknown[]).includes(x)) {
      fail(`layer_types[${i}] is ${JSON.stringify(x)}; expected one of ${LAYER_TYPES.join(', ')}.`, { field: 'layer_types' });
    }
  });
  return list as LayerType[];
}

/** The Qwen3.5 fields of config.json for `q` (inverse of parseQwen35). */
export function qwen35HFFields(q: Qwen35Config): { fields: Record<string, unknown>; rope: Record<string, unknown> } {
  const rope: Record<string, unknown> = { partial_rotary_factor: q.partialRotaryFactor };
  if (q.mropeSection) rope.mrope_section = [...q.mropeSection];
  return {
    fields: {
      layer_types: [...q.layerTypes],
      linear_num_key_heads: q.linear.numKeyHeads,
      linear_num_value_heads: q.linear.numValueHeads,
      linear_key_head_dim: q.linear.keyHeadDim,
      linear_value_head_dim: q.linear.valueHeadDim,
      linear_conv_kernel_dim: q.linear.convKernelDim,
    },
    rope,
  };
}
