/**
 * What a Megatron rank publishes to the weight sync (parallel/weight-sources.ts): every
 * Megatron tensor it holds with its placement over the mesh and its HF mapping —
 * replicated dense tensors whole (owned by rank (0, 0)); linear_qkv (qkv), dense
 * linear_fc1 (gate-up) Shard(0) and linear_proj / linear_fc2 Shard(1) over tp (owned by
 * dp rank 0); each MoE layer's stacked local experts Shard(0) over ep, which is the fused
 * HF tensor (owned by tp rank 0 of the first expert-data-parallel replica). Pure: the
 * strategy attaches the communicators and its device tensors.
 */
import { InternalError } from '../../runtime/errors.js';
import { isMoeLayer, type ModelConfig } from '../../model/config.js';
import { fusedExpertNames } from '../../model/params.js';
import { Replicate, Shard } from '../../parallel/placement.js';
import { numelOf, type HfMapping, type SourceDescriptor } from '../../parallel/weight-sources.js';
import { megatronSpecs, type MegatronSpec } from './bridge.js';
import type { ParallelSizes } from './layout.js';

/** The communicator a source's placement is over: the mesh's tp dim, the expert-parallel group, or none. */
export type SourceGroup = 'tp' | 'ep' | null;

export const expertUnitName = (layer: number, fc: 'fc1' | 'fc2') => `decoder.layers.${layer}.mlp.experts.linear_fc${fc === 'fc1' ? 1 : 2}`;

/** The HF name of a replicated (non-expert) Megatron tensor. */
export function hfNameOfReplicated(spec: MegatronSpec): string {
  const n = spec.name;
  if (n === 'embedding.word_embeddings.weight') return 'model.embed_tokens.weight';
  if (n === 'output_layer.weight') return 'lm_head.weight';
  if (n === 'decoder.final_layernorm.weight') return 'model.norm.weight';
  const p = `model.layers.${spec.layer}`;
  if (n.endsWith('linear_qkv.layer_norm_weight')) return `${p}.input_layernorm.weight`;
  if (n.endsWith('q_layernorm.weight')) return `${p}.self_attn.q_norm.weight`;
  if (n.endsWith('k_layernorm.weight')) return `${p}.self_attn.k_norm.weight`;
  if (n.endsWith('pre_mlp_layernorm.weight') || n.endsWith('linear_fc1.layer_norm_weight')) return `${p}.post_attention_layernorm.weight`;
  if (n.endsWith('mlp.router.weight')) return `${p}.mlp.gate.weight`;
  throw new InternalError(`megatron weight sources: ${n} is not a replicated dense tensor`);
}

function mappingOf(cfg: ModelConfig, spec: MegatronSpec): HfMapping {
  const p = `model.layers.${spec.layer}`;
  if (spec.tp === 'replicated') return { kind: 'identity', hf: hfNameOfReplicated(spec) };
  if (spec.tp === 'column')
    return {
      kind: 'qkv',
      q: `${p}.self_attn.q_proj.weight`,
      k: `${p}.self_attn.k_proj.weight`,
      v: `${p}.self_attn.v_proj.weight`,
      heads: cfg.numHeads,
      kvHeads: cfg.numKvHeads,
      headDim: cfg.headDim,
    };
  if (spec.tp === 'gate-up') return { kind: 'gate-up', gate: `${p}.mlp.gate_proj.weight`, up: `${p}.mlp.up_proj.weight` };
  return { kind: 'identity', hf: spec.name.endsWith('linear_proj.weight') ? `${p}.self_attn.o_proj.weight` : `${p}.mlp.down_proj.weight` };
}

/** The sources of mesh coordinate [d, t] (dp rank d, tp rank t), with the group each placement is over. */
export function megatronSourceDescriptors(cfg: ModelConfig, sizes: ParallelSizes, coord: readonly number[]): Array<SourceDescriptor & { group: SourceGroup }> {
  const [d, t] = coord as [number, number];
  const { tp, ep } = sizes;
  const out: Array<SourceDescriptor & { group: SourceGroup }> = [];
  for (const spec of megatronSpecs(cfg)) {
    if (spec.expert !== undefined) continue;
    const N = numelOf(spec.shape);
    const map = mappingOf(cfg, spec);
    if (spec.tp === 'replicated')
      out.push({
        key: spec.name,
        shape: [...spec.shape],
        placement: Replicate(),
        parts: 1,
        part: 0,
        localNumel: N,
        map,
        owner: d === 0 && t === 0,
        group: null,
      });
    else
      out.push({
        key: spec.name,
        shape: [...spec.shape],
        placement: Shard(spec.tp === 'row' ? 1 : 0),
        parts: tp,
        part: t,
        localNumel: N / tp,
        map,
        owner: d === 0,
        group: 'tp',
      });
  }
  if (cfg.moe) {
    const { numExperts: E, intermediateSize: I } = cfg.moe;
    const H = cfg.hiddenSize;
    for (let layer = 0; layer < cfg.numLayers; layer++) {
      if (!isMoeLayer(cfg, layer)) continue;
      const f = fusedExpertNames(layer);
      for (const [fc, shape, hf] of [
        ['fc1', [E, 2 * I, H], f.gateUp],
        ['fc2', [E, H, I], f.down],
      ] as const) {
        out.push({
          key: expertUnitName(layer, fc),
          shape: [...shape],
          placement: Shard(0),
          parts: ep,
          part: d % ep,
          localNumel: numelOf(shape) / ep,
          map: { kind: 'experts', hf },
          owner: t === 0 && Math.floor(d / ep) === 0,
          group: 'ep',
        });
      }
    }
  }
  return out;
}
