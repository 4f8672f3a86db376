/**
 * Megatron-named tensors → HF-named full tensors ON THE DEVICE (the host bridge,
 * megatron/bridge.ts, does the same on the host): from the rank-major TP shards of one
 * Megatron tensor (shards = [tp · n], shard t at t·n, as an all-gather leaves them) to
 * the HF tensors it holds, by strided reads into `scratch` (never the whole model):
 *
 *   column linear_qkv  → gathered = full interleaved [nKV·(g+2)·D, H] → q, k, v
 *   gate-up linear_fc1 → shard t = gate_t ‖ up_t → gate_proj, up_proj
 *   row linear_proj / linear_fc2 → [R, tp, C/tp] read → o_proj / down_proj
 *   replicated         → the tensor itself under its HF name
 *
 * Experts are not here: Megatron's per-expert linear_fc1 / linear_fc2 go to the engine
 * by expertDirectWrite (colocate) or as HF per-expert gate/up/down views (server).
 */
import { InternalError } from '../runtime/errors.js';
import type { Stream, Tensor } from '../runtime/device/device-index.js';
import { stridedRead, viewOf } from '../runtime/device/views.js';
import type { ModelConfig } from '../model/config.js';
import type { MegatronSpec } from '../train/megatron/bridge.js';
import type { TpShard } from '../rollout/tp-shard.js';
import type { SliceGeometry } from '../rollout/slice-range.js';

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
  throw new InternalError(`megatron-hf: ${n} is not a replicated dense tensor`);
}

/**
 * HF tensors held by the TP-split Megatron tensor `spec`, given its rank-major shards
 * ([tp · n] contiguous). Results are views into `scratch` (at least tp · n elements);
 * they stay valid until scratch is reused (stream order).
 */
export function hfFromShards(cfg: ModelConfig, spec: MegatronSpec, shards: Tensor, tp: number, scratch: Tensor, stream: Stream): Array<[string, Tensor]> {
  const { hiddenSize: H, headDim: D, numHeads: nH, numKvHeads: nKV } = cfg;
  const p = `model.layers.${spec.layer}`;
  const N = spec.shape[0]! * spec.shape[1]!;
  const n = N / tp;
  const src = viewOf(shards, [N]);
  if (spec.name.endsWith('linear_qkv.weight')) {
    const g = nH / nKV;
    const q = viewOf(scratch, [nH * D, H], 0), k = viewOf(scratch, [nKV * D, H], nH * D * H), v = viewOf(scratch, [nKV * D, H], (nH + nKV) * D * H);
    const grp = (g + 2) * D * H;
    stridedRead(q.reshape([q.numel]), src, [nKV, g * D * H], [grp, 1], 0, stream);
    stridedRead(k.reshape([k.numel]), src, [nKV, D * H], [grp, 1], g * D * H, stream);
    stridedRead(v.reshape([v.numel]), src, [nKV, D * H], [grp, 1], (g + 1) * D * H, stream);
    return [[`${p}.self_attn.q_proj.weight`, q], [`${p}.self_attn.k_proj.weight`, k], [`${p}.self_attn.v_proj.weight`, v]];
  }
  if (spec.tp === 'gate-up') {
    const I = spec.shape[0]! / 2;
    const gate = viewOf(scratch, [I, H], 0), up = viewOf(scratch, [I, H], I * H);
    stridedRead(gate.reshape([I * H]), src, [tp, n / 2], [n, 1], 0, stream);
    stridedRead(up.reshape([I * H]), src, [tp, n / 2], [n, 1], n / 2, stream);
    return [[`${p}.mlp.gate_proj.weight`, gate], [`${p}.mlp.up_proj.weight`, up]];
  }
  if (spec.tp === 'row') {
    const [R, C] = spec.shape as [number, number];
    const Cl = C / tp;
    const full = viewOf(scratch, [R, C], 0);
    stridedRead(full.reshape([R * C]), src, [R, tp, Cl], [Cl, R * Cl, 1], 0, stream);
    const name = spec.name.endsWith('linear_proj.weight') ? `${p}.self_attn.o_proj.weight` : `${p}.mlp.down_proj.weight`;
    return [[name, full]];
  }
  if (spec.tp === 'column') throw new InternalError(`megatron-hf: unexpected column tensor ${spec.name}`);
  return [[hfNameOfReplicated(spec), viewOf(shards, spec.shape)]];
}

/**
 * Trainer tp == engine tp: the engine runtime parameter that Megatron TP shard `spec`
 * (of the same tp rank) fills, and the slice writes from the flat shard into it (the
 * preprocessed layout, equal to the processed one for these dense tensors):
 * linear_qkv [groups·(g+2)·D, H] is de-interleaved per query group into q ‖ k ‖ v,
 * linear_proj / linear_fc1 (gate_t ‖ up_t) / linear_fc2 are the engine's local tensor as is.
 */
export function localShardWrites(cfg: ModelConfig, spec: MegatronSpec, shard: TpShard): { param: string; geometry: SliceGeometry[] } {
  const p = `model.layers.${spec.layer}`;
  const n = (spec.shape[0]! * spec.shape[1]!) / shard.tpSize;
  const whole = (param: string) => ({ param, geometry: [{ view: [n], dim: 0, start: 0, len: n, dstOffset: 0 }] });
  if (spec.name.endsWith('linear_qkv.weight')) {
    const { hiddenSize: H, headDim: D, numHeads: nH, numKvHeads: nKV } = cfg;
    const g = nH / nKV, groups = shard.kvHeadsLocal;
    const row = (g + 2) * D * H, view = [groups, row];
    const hl = groups * g * D * H, kvl = groups * D * H;
    return {
      param: `${p}.self_attn.qkv_proj.weight`,
      geometry: [
        { view, dim: 1, start: 0, len: g * D * H, dstOffset: 0 },
        { view, dim: 1, start: g * D * H, len: D * H, dstOffset: hl },
        { view, dim: 1, start: (g + 1) * D * H, len: D * H, dstOffset: hl + kvl },
      ],
    };
  }
  if (spec.name.endsWith('linear_proj.weight')) return whole(`${p}.self_attn.o_proj.weight`);
  if (spec.name.endsWith('mlp.linear_fc1.weight')) return whole(`${p}.mlp.gate_up_proj.weight`);
  if (spec.name.endsWith('mlp.linear_fc2.weight')) return whole(`${p}.mlp.down_proj.weight`);
  throw new InternalError(`megatron-hf: no local mapping for ${spec.name}`);
}
