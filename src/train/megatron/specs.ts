/**
 * The Megatron tensors of a model, derived from its HF parameter specs (model/params.ts, fused
 * experts) by one rule per HF module, so Qwen3, Qwen3-MoE, Qwen3.5 and Qwen3.5-MoE share one
 * table. Each Megatron tensor says how it splits over tensor-parallel ranks and which HF tensors
 * it is made of (`hf`), which the bridge, the sharded load and the weight sources all read.
 *
 * - attention: q/k/v → `self_attention.linear_qkv` (column, interleaved by query group; Qwen3.5's
 *   gated q_proj counts 2·nH query "heads" of D rows, the query then its gate, so a TP shard of
 *   whole KV groups keeps every gate with its head); o_proj → `linear_proj` (row); q/k norms
 *   and the input norm (TE-fused `linear_qkv.layer_norm_weight`) replicated.
 * - Gated DeltaNet (Qwen3.5 `linear_attn.*`) → `self_attention.*` under the same module names
 *   (`norm` → `out_norm`, the input norm → `in_proj_qkv.layer_norm_weight`), every tensor
 *   replicated over tp: as the reference Megatron fallback, a GDN layer has no tensor- or
 *   context-parallel split, so each TP rank runs it whole.
 * - dense MLP and the Qwen3.5-MoE shared expert: gate/up → `linear_fc1` (gate ‖ up, column),
 *   down → `linear_fc2` (row); the shared expert's gate → `shared_experts.gate_weight`
 *   (replicated); router and experts as Qwen3-MoE (experts one Megatron tensor per expert,
 *   replicated over tp, sharded over ep by the strategy).
 */
import { InternalError } from '../../runtime/errors.js';
import { isQwen35, type ModelConfig } from '../../model/config.js';
import { fusedExpertNames } from '../../model/expert-names.js';
import { paramSpecs, type ParamSpec } from '../../model/params.js';

/** How a Megatron tensor is split over tensor-parallel ranks. */
export type TpSplit = 'replicated' | 'column' | 'row' | 'gate-up';

/** The HF tensors one Megatron tensor is made of. */
export type HfSource =
  | { kind: 'copy'; hf: string }
  /** linear_qkv: `qHeads` query row blocks of D rows (2·nH for a gated q_proj), interleaved by query group. */
  | { kind: 'qkv'; q: string; k: string; v: string; qHeads: number }
  | { kind: 'gate-up'; gate: string; up: string }
  /** Expert `spec.expert` of a fused HF expert tensor. */
  | { kind: 'expert'; hf: string };

export interface MegatronSpec {
  name: string;
  shape: number[];
  tp: TpSplit;
  layer?: number;
  /** Global expert index (expert tensors only). */
  expert?: number;
  hf: HfSource;
}

const L = (i: number) => `decoder.layers.${i}`;
export const expertNames = (layer: number, e: number) => ({
  fc1: `${L(layer)}.mlp.experts.local_experts.${e}.linear_fc1.weight`,
  fc2: `${L(layer)}.mlp.experts.local_experts.${e}.linear_fc2.weight`,
});

/** Query row blocks of D rows in q_proj: Qwen3.5's full attention gates its output, so each head has a query and a gate block. */
export const qkvQueryHeads = (cfg: ModelConfig): number => (isQwen35(cfg) ? 2 : 1) * cfg.numHeads;

const GLOBAL: Record<string, string> = {
  'model.embed_tokens.weight': 'embedding.word_embeddings.weight',
  'lm_head.weight': 'output_layer.weight',
  'model.norm.weight': 'decoder.final_layernorm.weight',
};

/** The Megatron specs of one HF spec (none when it is fused into a sibling's, e.g. k_proj into linear_qkv). */
function rule(cfg: ModelConfig, s: ParamSpec, layerHas: (i: number, suffix: string) => boolean): MegatronSpec[] {
  const copy = (name: string, tp: TpSplit = 'replicated'): MegatronSpec[] => [
    { name, shape: [...s.shape], tp, ...(s.layer === undefined ? {} : { layer: s.layer }), hf: { kind: 'copy', hf: s.name } },
  ];
  if (s.layer === undefined) {
    const name = GLOBAL[s.name];
    if (!name) throw new InternalError(`megatron specs: no rule for ${s.name}`);
    return copy(name);
  }
  const i = s.layer;
  const p = `model.layers.${i}.`;
  const m = `${L(i)}.`;
  const mod = s.name.slice(p.length);
  const H = cfg.hiddenSize;
  const gdn = layerHas(i, 'linear_attn.in_proj_qkv.weight');
  const fused = (name: string, shape: number[], tp: TpSplit, hf: HfSource): MegatronSpec[] => [{ name, shape, tp, layer: i, hf }];
  switch (mod) {
    case 'input_layernorm.weight':
      return copy(`${m}self_attention.${gdn ? 'in_proj_qkv' : 'linear_qkv'}.layer_norm_weight`);
    case 'post_attention_layernorm.weight':
      return copy(`${m}${layerHas(i, 'mlp.gate.weight') ? 'pre_mlp_layernorm.weight' : 'mlp.linear_fc1.layer_norm_weight'}`);
    case 'self_attn.q_proj.weight': {
      const q = qkvQueryHeads(cfg);
      const rows = (q + 2 * cfg.numKvHeads) * cfg.headDim;
      return fused(`${m}self_attention.linear_qkv.weight`, [rows, H], 'column', {
        kind: 'qkv',
        q: s.name,
        k: `${p}self_attn.k_proj.weight`,
        v: `${p}self_attn.v_proj.weight`,
        qHeads: q,
      });
    }
    case 'self_attn.k_proj.weight':
    case 'self_attn.v_proj.weight':
    case 'mlp.up_proj.weight':
    case 'mlp.shared_expert.up_proj.weight':
      return [];
    case 'self_attn.o_proj.weight':
      return copy(`${m}self_attention.linear_proj.weight`, 'row');
    case 'self_attn.q_norm.weight':
      return copy(`${m}self_attention.q_layernorm.weight`);
    case 'self_attn.k_norm.weight':
      return copy(`${m}self_attention.k_layernorm.weight`);
    case 'mlp.gate.weight':
      return copy(`${m}mlp.router.weight`);
    case 'mlp.gate_proj.weight':
    case 'mlp.shared_expert.gate_proj.weight': {
      const pre = mod.startsWith('mlp.shared_expert.') ? 'mlp.shared_experts' : 'mlp';
      const up = s.name.replace(/gate_proj\.weight$/, 'up_proj.weight');
      return fused(`${m}${pre}.linear_fc1.weight`, [2 * s.shape[0]!, H], 'gate-up', { kind: 'gate-up', gate: s.name, up });
    }
    case 'mlp.down_proj.weight':
      return copy(`${m}mlp.linear_fc2.weight`, 'row');
    case 'mlp.shared_expert.down_proj.weight':
      return copy(`${m}mlp.shared_experts.linear_fc2.weight`, 'row');
    case 'mlp.shared_expert_gate.weight':
      return copy(`${m}mlp.shared_experts.gate_weight`);
  }
  const f = fusedExpertNames(i);
  if (s.name === f.gateUp || s.name === f.down) {
    const fc = s.name === f.gateUp ? 'fc1' : 'fc2';
    const [E, a, b] = s.shape as [number, number, number];
    return Array.from({ length: E }, (_, e) => ({
      name: expertNames(i, e)[fc],
      shape: [a, b],
      tp: 'replicated' as const,
      layer: i,
      expert: e,
      hf: { kind: 'expert', hf: s.name },
    }));
  }
  if (mod.startsWith('linear_attn.')) {
    const part = mod.slice('linear_attn.'.length);
    return copy(`${m}self_attention.${part === 'norm.weight' ? 'out_norm.weight' : part}`);
  }
  throw new InternalError(`megatron specs: no rule for ${s.name}`);
}

/** Every full (unsharded) Megatron parameter of `cfg`, in HF module order. */
export function megatronSpecs(cfg: ModelConfig): MegatronSpec[] {
  const hf = paramSpecs(cfg, { expertLayout: 'fused' });
  const names = new Set(hf.map((s) => s.name));
  const layerHas = (i: number, suffix: string) => names.has(`model.layers.${i}.${suffix}`);
  return hf.flatMap((s) => rule(cfg, s, layerHas));
}

/** Every HF tensor a Megatron spec is made of. */
export function hfNamesOf(src: HfSource): string[] {
  return src.kind === 'qkv' ? [src.q, src.k, src.v] : src.kind === 'gate-up' ? [src.gate, src.up] : [src.hf];
}
