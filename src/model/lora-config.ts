/**
 * LoRA configuration (PEFT-like): the zod schema, and its resolution against a model
 * config into the list of adapted weights.
 *
 * - `targetModules` ⊆ ['q','k','v','o','gate','up','down'] adapts the dense projections of
 *   every layer that has them: q → `self_attn.q_proj`, …, gate/up/down → `mlp.{gate,up,down}_proj`
 *   (dense MLP layers only; the MoE router `mlp.gate` is never adapted). Qwen3.5 adds its Gated
 *   DeltaNet projections (in_proj_qkv / in_proj_z / in_proj_b / in_proj_a / out_proj →
 *   `linear_attn.*`; its gated q_proj is `q`, query and gate rows alike) and Qwen3.5-MoE its shared
 *   expert (shared_gate / shared_up / shared_down → `mlp.shared_expert.{gate,up,down}_proj`).
 * - `targetParameters` adapts fused expert weights, by full name
 *   (`model.layers.3.mlp.experts.gate_up_proj`) or by suffix (`mlp.experts.gate_up_proj`,
 *   `experts.down_proj`, matched on a '.' boundary): one A/B pair per expert, grouped.
 *
 * Errors are ConfigErrors naming what was wrong: an unknown module lists the valid ones, a
 * target that matches no parameter of the model is named, and fused-expert LoRA with
 * dropout > 0 is refused (the grouped path has no per-token dropout mask).
 */
import { z } from 'zod';
import { ConfigError } from '../runtime/errors.js';
import { formatIssues } from '../runtime/config.js';
import { isMoeLayer, type ModelConfig } from './config.js';
import { paramSpecs } from './params.js';

/** Short module names → the HF module path inside a decoder layer. */
export const LORA_MODULES = {
  q: 'self_attn.q_proj',
  k: 'self_attn.k_proj',
  v: 'self_attn.v_proj',
  o: 'self_attn.o_proj',
  gate: 'mlp.gate_proj',
  up: 'mlp.up_proj',
  down: 'mlp.down_proj',
  in_proj_qkv: 'linear_attn.in_proj_qkv',
  in_proj_z: 'linear_attn.in_proj_z',
  in_proj_b: 'linear_attn.in_proj_b',
  in_proj_a: 'linear_attn.in_proj_a',
  out_proj: 'linear_attn.out_proj',
  shared_gate: 'mlp.shared_expert.gate_proj',
  shared_up: 'mlp.shared_expert.up_proj',
  shared_down: 'mlp.shared_expert.down_proj',
} as const;
export type LoraModule = keyof typeof LORA_MODULES;
export const LORA_MODULE_NAMES = Object.keys(LORA_MODULES) as LoraModule[];

export const LoraConfigSchema = z
  .object({
    /** Adapter rank r (≥ 1). */
    rank: z.number({ error: 'expected rank as a number' }).int('expected an integer rank').min(1, 'expected rank ≥ 1'),
    /** Scaling numerator: the update is (alpha / rank) · B·A. */
    alpha: z.number({ error: 'expected alpha as a number' }).positive('expected alpha > 0'),
    /** Dropout probability on the adapter input, in [0, 1); dense targets only. */
    dropout: z.number({ error: 'expected dropout as a number' }).min(0, 'expected dropout in [0, 1)').lt(1, 'expected dropout in [0, 1)').default(0),
    /** Dense projections to adapt in every layer that has them. */
    targetModules: z
      .array(
        z.enum(LORA_MODULE_NAMES as [LoraModule, ...LoraModule[]], {
          error: (iss) => `unknown module ${JSON.stringify(iss.input)}; valid modules are ${LORA_MODULE_NAMES.join(', ')}`,
        }),
      )
      .default([]),
    /** Fused expert parameters to adapt, by full name or '.'-bounded suffix. */
    targetParameters: z.array(z.string().min(1, 'expected a non-empty parameter name')).default([]),
    /** Seed of the adapter init (A) and, mixed with the step, of the dropout masks. */
    seed: z.number().int('expected an integer seed').default(0),
  })
  .strict();

export type LoraConfigInput = z.input<typeof LoraConfigSchema>;
export type LoraConfig = z.output<typeof LoraConfigSchema>;

/** One adapted weight. */
export interface LoraTarget {
  /** The base weight's HF name. */
  base: string;
  kind: 'linear' | 'experts';
  layer: number;
  /** Adapter parameter names (see lora.ts for the naming rule). */
  a: string;
  b: string;
  /** Base weight shape: [out, in] or [E, out, in]. */
  baseShape: number[];
  /** lora_A shape: [r, in] or [E, r, in]. */
  aShape: number[];
  /** lora_B shape: [out, r] or [E, out, r]. */
  bShape: number[];
}

/** Validates a LoRA config (defaults filled); throws one ConfigError listing every bad field. */
export function parseLoraConfig(value: unknown): LoraConfig {
  const r = LoraConfigSchema.safeParse(value);
  if (!r.success) {
    throw new ConfigError(`Invalid LoRA config:\n${formatIssues(r.error)}`, {
      issues: r.error.issues.map((i) => ({ path: i.path.map(String), message: i.message })),
    });
  }
  const c = r.data;
  if (c.targetModules.length === 0 && c.targetParameters.length === 0) {
    throw new ConfigError(
      `Invalid LoRA config: no targets. HINT: set targetModules (some of ${LORA_MODULE_NAMES.join(', ')}) and/or targetParameters (e.g. 'mlp.experts.gate_up_proj').`,
    );
  }
  if (c.targetParameters.length > 0 && c.dropout > 0) {
    throw new ConfigError(
      `Invalid LoRA config: dropout ${c.dropout} with fused-expert targets [${c.targetParameters.join(', ')}] is not supported: the grouped expert path has no per-token dropout mask. HINT: set dropout to 0, or adapt only dense targetModules.`,
      { dropout: c.dropout, targetParameters: c.targetParameters },
    );
  }
  return { ...c, targetModules: [...new Set(c.targetModules)], targetParameters: [...new Set(c.targetParameters)] };
}

const loraNames = (base: string, kind: LoraTarget['kind']) =>
  kind === 'linear'
    ? { a: base.replace(/\.weight$/, '.lora_A.weight'), b: base.replace(/\.weight$/, '.lora_B.weight') }
    : { a: `${base}.lora_A`, b: `${base}.lora_B` };

/** The weights a (parsed) LoRA config adapts in `cfg`, in HF parameter order. */
export function resolveLoraTargets(cfg: ModelConfig, lora: LoraConfig): LoraTarget[] {
  const r = lora.rank;
  const specs = paramSpecs(cfg, { expertLayout: 'fused' });
  const wantedModules = new Map(lora.targetModules.map((m) => [LORA_MODULES[m], m]));
  const usedModules = new Set<LoraModule>();
  const usedParams = new Set<string>();
  const out: LoraTarget[] = [];
  for (const s of specs) {
    if (s.layer === undefined) continue;
    let kind: LoraTarget['kind'] | undefined;
    if (s.kind === 'linear') {
      const module = s.name.slice(`model.layers.${s.layer}.`.length).replace(/\.weight$/, '');
      const m = wantedModules.get(module as (typeof LORA_MODULES)[LoraModule]);
      if (m === undefined) continue;
      usedModules.add(m);
      kind = 'linear';
    } else if (s.kind === 'experts' && isMoeLayer(cfg, s.layer)) {
      const hits = lora.targetParameters.filter((t) => s.name === t || s.name.endsWith(`.${t}`));
      if (hits.length === 0) continue;
      for (const h of hits) usedParams.add(h);
      kind = 'experts';
    } else continue;
    const shape = [...s.shape];
    const [out_, in_] = shape.slice(-2) as [number, number];
    const lead = kind === 'experts' ? [shape[0]!] : [];
    out.push({ base: s.name, kind, layer: s.layer, ...loraNames(s.name, kind), baseShape: shape, aShape: [...lead, r, in_], bShape: [...lead, out_, r] });
  }
  const unusedModules = lora.targetModules.filter((m) => !usedModules.has(m));
  if (unusedModules.length) {
    throw new ConfigError(
      `LoRA targetModules [${unusedModules.join(', ')}] match no parameter of this ${cfg.modelType} model (${unusedModules.map((m) => LORA_MODULES[m]).join(', ')} exist in no layer; MoE layers have no dense gate/up/down, only Qwen3.5 has linear_attn and only Qwen3.5-MoE a shared expert). HINT: remove them, or adapt experts with targetParameters.`,
      { targetModules: unusedModules },
    );
  }
  const unusedParams = lora.targetParameters.filter((t) => !usedParams.has(t));
  if (unusedParams.length) {
    const example = specs.find((s) => s.kind === 'experts')?.name;
    throw new ConfigError(
      `LoRA targetParameters [${unusedParams.join(', ')}] match no fused expert parameter of this ${cfg.modelType} model. HINT: ${example ? `use a full name such as ${example} or a suffix such as mlp.experts.gate_up_proj / mlp.experts.down_proj` : 'this model has no MoE experts; use targetModules'}.`,
      { targetParameters: unusedParams },
    );
  }
  return out;
}
