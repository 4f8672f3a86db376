/**
 * Parameters of a Qwen3.5 text model, named as Transformers' `Qwen3_5ForCausalLM` module tree
 * names them: per layer either a Gated DeltaNet (`linear_attn.*`: in_proj_qkv, in_proj_z,
 * in_proj_b, in_proj_a, conv1d, dt_bias, A_log, the gated norm, out_proj) or gated full attention
 * (`self_attn.*`, q_proj twice as wide: per head the query then its output gate), then the dense
 * MLP, or for Qwen3.5-MoE the sparse block: router `mlp.gate`, the experts (fused
 * `mlp.experts.gate_up_proj` / `down_proj` as the hub writes them, or per-expert), the shared
 * expert `mlp.shared_expert.{gate,up,down}_proj` and its gate `mlp.shared_expert_gate` [1, H].
 * Checkpoints of `Qwen3_5ForConditionalGeneration` name the text model
 * `model.language_model.*` and also carry the vision tower (`model.visual.*`) and the multi-token
 * prediction head (`mtp.*`); textOnlyWeights maps them to the text model.
 */
import { CheckpointFormatError } from '../runtime/errors.js';
import type { ModelConfig } from './config.js';
import { fusedExpertNames, perExpertNames } from './expert-names.js';
import type { ExpertLayout, ParamKind, ParamSpec } from './params.js';

/** Width of the conv / in_proj_qkv output: q‖k‖v of the gated delta rule. */
export function gdnConvDim(cfg: ModelConfig): number {
  const l = cfg.qwen35!.linear;
  return 2 * l.numKeyHeads * l.keyHeadDim + l.numValueHeads * l.valueHeadDim;
}

/** Every parameter of a qwen3_5 / qwen3_5_moe `cfg` in HF module order (experts in `layout`). */
export function qwen35ParamSpecs(cfg: ModelConfig, layout: ExpertLayout = 'fused'): ParamSpec[] {
  const q = cfg.qwen35!;
  const { hiddenSize: H, headDim: D, numHeads: nH, numKvHeads: nKV } = cfg;
  const { numValueHeads: Hv, valueHeadDim: Dv, convKernelDim: K } = q.linear;
  const specs: ParamSpec[] = [{ name: 'model.embed_tokens.weight', shape: [cfg.vocabSize, H], kind: 'embedding' }];
  for (let i = 0; i < cfg.numLayers; i++) {
    const p = `model.layers.${i}`;
    const add = (name: string, shape: number[], kind: ParamKind) => specs.push({ name: `${p}.${name}`, shape, kind, layer: i });
    if (q.layerTypes[i] === 'linear_attention') {
      add('linear_attn.conv1d.weight', [gdnConvDim(cfg), 1, K], 'conv');
      add('linear_attn.dt_bias', [Hv], 'gdn_dt_bias');
      add('linear_attn.A_log', [Hv], 'gdn_a_log');
      add('linear_attn.norm.weight', [Dv], 'norm');
      add('linear_attn.out_proj.weight', [H, Hv * Dv], 'linear');
      add('linear_attn.in_proj_qkv.weight', [gdnConvDim(cfg), H], 'linear');
      add('linear_attn.in_proj_z.weight', [Hv * Dv, H], 'linear');
      add('linear_attn.in_proj_b.weight', [Hv, H], 'linear');
      add('linear_attn.in_proj_a.weight', [Hv, H], 'linear');
    } else {
      add('self_attn.q_proj.weight', [2 * nH * D, H], 'linear');
      add('self_attn.k_proj.weight', [nKV * D, H], 'linear');
      add('self_attn.v_proj.weight', [nKV * D, H], 'linear');
      add('self_attn.o_proj.weight', [H, nH * D], 'linear');
      add('self_attn.q_norm.weight', [D], 'centred_norm');
      add('self_attn.k_norm.weight', [D], 'centred_norm');
    }
    if (cfg.moe) specs.push(...sparseBlockSpecs(cfg, i, layout));
    else {
      add('mlp.gate_proj.weight', [cfg.intermediateSize, H], 'linear');
      add('mlp.up_proj.weight', [cfg.intermediateSize, H], 'linear');
      add('mlp.down_proj.weight', [H, cfg.intermediateSize], 'linear');
    }
    add('input_layernorm.weight', [H], 'centred_norm');
    add('post_attention_layernorm.weight', [H], 'centred_norm');
  }
  specs.push({ name: 'model.norm.weight', shape: [H], kind: 'centred_norm' });
  if (!cfg.tieWordEmbeddings) specs.push({ name: 'lm_head.weight', shape: [cfg.vocabSize, H], kind: 'linear' });
  return specs;
}

/** Qwen3_5MoeSparseMoeBlock of layer `i`: router, experts, shared expert, shared-expert gate. */
function sparseBlockSpecs(cfg: ModelConfig, i: number, layout: ExpertLayout): ParamSpec[] {
  const { numExperts: E, intermediateSize: I, sharedExpertIntermediateSize: Is } = cfg.moe!;
  const H = cfg.hiddenSize;
  const p = `model.layers.${i}.mlp`;
  const out: ParamSpec[] = [{ name: `${p}.gate.weight`, shape: [E, H], kind: 'router', layer: i }];
  if (layout === 'fused') {
    const n = fusedExpertNames(i);
    out.push({ name: n.gateUp, shape: [E, 2 * I, H], kind: 'experts', layer: i }, { name: n.down, shape: [E, H, I], kind: 'experts', layer: i });
  } else {
    for (let e = 0; e < E; e++) {
      const n = perExpertNames(i, e);
      out.push(
        { name: n.gate, shape: [I, H], kind: 'experts', layer: i, expert: e },
        { name: n.up, shape: [I, H], kind: 'experts', layer: i, expert: e },
        { name: n.down, shape: [H, I], kind: 'experts', layer: i, expert: e },
      );
    }
  }
  for (const [name, shape] of [
    ['shared_expert.gate_proj.weight', [Is!, H]],
    ['shared_expert.up_proj.weight', [Is!, H]],
    ['shared_expert.down_proj.weight', [H, Is!]],
    ['shared_expert_gate.weight', [1, H]],
  ] as const)
    out.push({ name: `${p}.${name}`, shape: [...shape], kind: 'linear', layer: i });
  return out;
}

const LANGUAGE_MODEL = 'model.language_model.';
const SKIPPED = [/^model\.visual\./, /^mtp\./];

/**
 * The text model's weights of a Qwen3.5 checkpoint under the names qwen35ParamSpecs uses:
 * `model.language_model.X` becomes `model.X`, the vision tower and the MTP head are dropped
 * (one `log` line says how many, so a text-only load never drops weights silently). A checkpoint
 * with both spellings of one tensor is refused.
 */
export function textOnlyWeights<T>(
  params: ReadonlyMap<string, T>,
  log: (line: string) => void = (l) => process.stderr.write(`${l}\n`),
  modelType = 'qwen3_5',
): Map<string, T> {
  const out = new Map<string, T>();
  const skipped: Record<string, number> = {};
  for (const [name, t] of params) {
    const skip = SKIPPED.find((re) => re.test(name));
    if (skip) {
      const key = name.startsWith('mtp.') ? 'mtp.*' : 'model.visual.*';
      skipped[key] = (skipped[key] ?? 0) + 1;
      continue;
    }
    const text = name.startsWith(LANGUAGE_MODEL) ? `model.${name.slice(LANGUAGE_MODEL.length)}` : name;
    if (out.has(text)) {
      throw new CheckpointFormatError(
        `The checkpoint holds ${JSON.stringify(text)} twice (as itself and under "model.language_model."); expected one spelling. HINT: re-export the checkpoint with one naming scheme.`,
        { tensor: text },
      );
    }
    out.set(text, t);
  }
  const parts = Object.entries(skipped).map(([k, n]) => `${n} ${k} tensor${n === 1 ? '' : 's'}`);
  if (parts.length) log(`${modelType}: loading the text model only; skipped ${parts.join(' and ')} (vision tower / multi-token prediction head).`);
  return out;
}
