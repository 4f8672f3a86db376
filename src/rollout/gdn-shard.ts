/**
 * The tensor-parallel split of a Qwen3.5 Gated DeltaNet layer (tp-shard.ts owns the head
 * arithmetic): per HF tensor, the rank-local runtime shape and the loader's slice writes.
 * Rank r holds key heads [hk0, hk0 + hk) and value heads [hv0, hv0 + hv):
 *
 *   in_proj_qkv [2·Hk·Dk + Hv·Dv, H] and conv1d [same channels, 1, K] (depthwise): rows
 *     q of its key heads, k of its key heads, v of its value heads → local q ‖ k ‖ v
 *     (parts 'q', 'k', 'v'; at tp 1 the whole tensor, one write);
 *   in_proj_z [Hv·Dv, H], in_proj_b / in_proj_a [Hv, H], dt_bias / A_log [Hv]: its value heads;
 *   norm.weight [Dv]: whole (one per head dim, shared by every head);
 *   out_proj [H, Hv·Dv]: the columns of its value heads (row parallel, summed by the
 *     forward's all-reduce).
 */
import { InternalError } from '../runtime/errors.js';
import type { ModelConfig } from '../model/config.js';
import type { SliceWrite } from './loader.js';
import type { TpShard } from './tp-shard.js';
import { gdnTensors } from './qwen35-layout.js';

export interface GdnLocalTensor {
  /** HF name (also the runtime parameter's) and full HF shape. */
  name: string;
  shape: number[];
  /** The rank's runtime shape and the part keys a full reload fills. */
  local: number[];
  parts: string[];
  writes: SliceWrite[];
}

/** The rank's GDN sizes: local key / value heads, head dims, conv taps and conv channels. */
export function gdnLocal(cfg: ModelConfig, shard: TpShard): { Hk: number; Hv: number; Dk: number; Dv: number; K: number; C: number } {
  const { keyHeadDim: Dk, valueHeadDim: Dv, convKernelDim: K } = cfg.qwen35!.linear;
  const Hk = shard.gdnKeyHeadsLocal,
    Hv = shard.gdnValueHeadsLocal;
  return { Hk, Hv, Dk, Dv, K, C: 2 * Hk * Dk + Hv * Dv };
}

/** The GDN tensors of layer `i` on TP rank `shard`, in HF module order. */
export function gdnLocalTensors(cfg: ModelConfig, shard: TpShard, i: number): GdnLocalTensor[] {
  const HkAll = cfg.qwen35!.linear.numKeyHeads;
  const { Hk, Hv, Dk, Dv, C } = gdnLocal(cfg, shard);
  const hk0 = shard.gdnKeyHeadStart,
    hv0 = shard.gdnValueHeadStart;
  const tp = shard.tpSize;
  return gdnTensors(cfg)
    .get(i)!
    .map(({ name, shape }) => {
      const inner = shape.slice(1).reduce((a, b) => a * b, 1);
      // dim-0 rows [start, start + len) of the HF tensor to local row `at`.
      const rows = (part: string, start: number, len: number, at: number): SliceWrite => ({
        param: name,
        parts: [part],
        view: shape,
        dim: 0,
        start,
        len,
        dstOffset: at * inner,
      });
      const t = (local: number[], writes: SliceWrite[], parts = ['all']) => ({ name, shape, local, parts, writes });
      const leaf = name.slice(name.indexOf('.linear_attn.') + '.linear_attn.'.length);
      switch (leaf) {
        case 'in_proj_qkv.weight':
        case 'conv1d.weight':
          if (tp === 1) return t(shape, [rows('all', 0, shape[0]!, 0)]);
          return t(
            [C, ...shape.slice(1)],
            [rows('q', hk0 * Dk, Hk * Dk, 0), rows('k', HkAll * Dk + hk0 * Dk, Hk * Dk, Hk * Dk), rows('v', 2 * HkAll * Dk + hv0 * Dv, Hv * Dv, 2 * Hk * Dk)],
            ['q', 'k', 'v'],
          );
        case 'in_proj_z.weight':
          return t([Hv * Dv, ...shape.slice(1)], [rows('all', hv0 * Dv, Hv * Dv, 0)]);
        case 'in_proj_b.weight':
        case 'in_proj_a.weight':
        case 'dt_bias':
        case 'A_log':
          return t([Hv, ...shape.slice(1)], [rows('all', hv0, Hv, 0)]);
        case 'norm.weight':
          return t(shape, [rows('all', 0, shape[0]!, 0)]);
        case 'out_proj.weight':
          return t([shape[0]!, Hv * Dv], [{ param: name, parts: ['all'], view: shape, dim: 1, start: hv0 * Dv, len: Hv * Dv, dstOffset: 0 }]);
        default:
          throw new InternalError(
            `GDN tensor ${name} has no tensor-parallel split in the rollout engine. HINT: params-qwen35.ts gained a linear_attn tensor; give it a split in gdn-shard.ts.`,
            { tensor: name },
          );
      }
    });
}
