/**
 * What a Megatron rank publishes to the weight sync (parallel/weight-sources.ts): every
 * Megatron tensor it holds with its placement over the mesh and its HF mapping —
 * replicated dense tensors whole (owned by rank (0, 0)), Gated DeltaNet layers included; linear_qkv
 * (qkv), dense / shared-expert linear_fc1 (gate-up) Shard(0) and linear_proj / linear_fc2 Shard(1)
 * over tp (owned by dp rank 0); each MoE layer's stacked local experts Shard(0) over ep, which is the fused
 * HF tensor (owned by tp rank 0 of the first expert-data-parallel replica). Pure: the
 * strategy attaches the communicators and its device tensors.
 */
import { InternalError } from '../../runtime/errors.js';
import type { ModelConfig } from '../../model/config.js';
import { Replicate, Shard } from '../../parallel/placement.js';
import { numelOf, type HfMapping, type SourceDescriptor } from '../../parallel/weight-sources.js';
import { megatronSpecs, type MegatronSpec } from './bridge.js';
import type { ParallelSizes } from './layout.js';

/** The communicator a source's placement is over: the mesh's tp dim, the expert-parallel group, or none. */
export type SourceGroup = 'tp' | 'ep' | null;

export const expertUnitName = (layer: number, fc: 'fc1' | 'fc2') => `decoder.layers.${layer}.mlp.experts.linear_fc${fc === 'fc1' ? 1 : 2}`;

/** The HF mapping of a (non-expert) Megatron tensor, from its HF sources (specs.ts). */
function mappingOf(cfg: ModelConfig, spec: MegatronSpec): HfMapping {
  const src = spec.hf;
  if (src.kind === 'copy') return { kind: 'identity', hf: src.hf };
  // A gated q_proj is qHeads = 2·nH blocks of D rows: the mapping's query heads are those blocks.
  if (src.kind === 'qkv') return { kind: 'qkv', q: src.q, k: src.k, v: src.v, heads: src.qHeads, kvHeads: cfg.numKvHeads, headDim: cfg.headDim };
  if (src.kind === 'gate-up') return { kind: 'gate-up', gate: src.gate, up: src.up };
  throw new InternalError(`megatron weight sources: ${spec.name} is an expert tensor (published per layer, stacked)`);
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
  // Each MoE layer's experts: one source per fused HF tensor (expert 0's spec stands for the layer's).
  for (const spec of megatronSpecs(cfg)) {
    if (spec.expert !== 0 || spec.hf.kind !== 'expert') continue;
    const E = cfg.moe!.numExperts;
    const fc = spec.name.endsWith('linear_fc1.weight') ? 'fc1' : 'fc2';
    const shape = [E, ...spec.shape];
    out.push({
      key: expertUnitName(spec.layer!, fc),
      shape,
      placement: Shard(0),
      parts: ep,
      part: d % ep,
      localNumel: numelOf(shape) / ep,
      map: { kind: 'experts', hf: spec.hf.hf },
      owner: t === 0 && Math.floor(d / ep) === 0,
      group: 'ep',
    });
  }
  return out;
}
