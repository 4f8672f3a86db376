/**
 * Direct writes into the engine's PROCESSED (runtime) layout, skipping the loader's
 * preprocessed stage and the post-load processing: what a colocated weight sync and a
 * LoRA adapter sync do (through a DirectSession). Each write is one strided device read from a full source tensor
 * into a contiguous region of the rank's local runtime tensor:
 *
 * - HF tensors whose runtime layout equals the preprocessed one (everything but the
 *   experts): the loader's own plan (hfLoadPlan: view, dim, start, len, dstOffset), so
 *   the TP slicing is the loader's, written once.
 * - Fused experts: gate_up_proj [E, 2I, H] → w13 processed [E, H, 2·Im_tp]
 *   (dst[e, h, j, i] = src[e, j·I + s + i, h]); down_proj [E, H, I] → w2 processed
 *   [E, Im_tp, H] (dst[e, i, h] = src[e, h, s + i]).
 * - Megatron per-expert linear_fc1 [2I, H] (gate ‖ up) and linear_fc2 [H, I]: the same
 *   maps restricted to expert e's contiguous block of w13 / w2.
 * Per-expert HF gate_proj / up_proj are not direct-writable (their processed columns
 * interleave with the other half); they are a loader (full reload) input.
 */
import type { Stream, Tensor } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import { stridedRead, viewOf } from '../runtime/device/views.js';
import type { ModelConfig } from '../model/config.js';
import type { HfEntry, SliceWrite } from './loader.js';
import type { TpShard } from './tp-shard.js';

export interface DirectWrite {
  /** Runtime parameter written. */
  param: string;
  /** Enqueues the write of `src` (the full source tensor) into `dst` (the parameter's local processed tensor). */
  write(dst: Tensor, src: Tensor, stream: Stream): void;
  /**
   * Set when the processed layout of the written region equals the loader's slice (every
   * parameter but the experts): the slice geometry, so a source that arrives in pieces can
   * be written piece by piece (slice-range.ts writeSliceRange) without assembling it.
   */
  range?: SliceWrite;
}

const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);
const FUSED = /^model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$/;
const PER_EXPERT = /^model\.layers\.\d+\.mlp\.experts\.\d+\./;

function checkSrc(name: string, src: Tensor, shape: readonly number[]): void {
  if (src.dtype !== 'fp32' || src.shape.length !== shape.length || src.shape.some((d, i) => d !== shape[i])) {
    throw new InvalidArgumentError(
      `Direct write of ${name}: expected an fp32 [${shape.join(', ')}] tensor but received ${src.dtype} [${src.shape.join(', ')}].`,
      { tensor: name },
    );
  }
}

/** The direct writes of the full HF tensor `name` on the TP rank `shard` (plan = hfLoadPlan(cfg, shard)). */
export function hfDirectWrites(cfg: ModelConfig, shard: TpShard, plan: ReadonlyMap<string, HfEntry>, name: string): DirectWrite[] {
  const entry = plan.get(name);
  if (!entry) throw new InvalidArgumentError(`Direct write: unknown HF tensor ${JSON.stringify(name)} for this ${cfg.modelType} config.`, { tensor: name });
  const H = cfg.hiddenSize;
  const m = FUSED.exec(name);
  if (m) {
    const { numExperts: E, intermediateSize: I } = cfg.moe!;
    const Im = shard.moeInterLocal,
      s = shard.moeInterStart;
    const p = `model.layers.${m[1]}.mlp.experts`;
    if (m[2] === 'gate_up_proj') {
      return [
        {
          param: `${p}.w13_weight`,
          write: (dst, src, stream) => {
            checkSrc(name, src, entry.shape);
            stridedRead(dst.reshape([dst.numel]), src, [E, H, 2, Im], [2 * I * H, 1, I * H, H], s * H, stream);
          },
        },
      ];
    }
    return [
      {
        param: `${p}.w2_weight`,
        write: (dst, src, stream) => {
          checkSrc(name, src, entry.shape);
          stridedRead(dst.reshape([dst.numel]), src, [E, Im, H], [H * I, 1, I], s, stream);
        },
      },
    ];
  }
  if (PER_EXPERT.test(name)) {
    throw new InvalidArgumentError(
      `Direct write of ${name}: per-expert HF expert tensors cannot be written in the processed layout one by one. HINT: pass the fused mlp.experts.gate_up_proj / down_proj, or Megatron linear_fc1 / linear_fc2 per expert (expertDirectWrite), or do a full reload.`,
      { tensor: name },
    );
  }
  return entry.writes.map((w) => ({
    param: w.param,
    range: w,
    write: (dst, src, stream) => {
      checkSrc(name, src, entry.shape);
      const outer = numel(w.view.slice(0, w.dim));
      const inner = numel(w.view.slice(w.dim + 1));
      const n = outer * w.len * inner;
      stridedRead(viewOf(dst.reshape([dst.numel]), [n], w.dstOffset), src, [outer, w.len, inner], [w.view[w.dim]! * inner, inner, 1], w.start * inner, stream);
    },
  }));
}

/** Direct write of Megatron expert e's full linear_fc1 [2I, H] ('fc1') or linear_fc2 [H, I] ('fc2') of `layer`. */
export function expertDirectWrite(cfg: ModelConfig, shard: TpShard, layer: number, e: number, fc: 'fc1' | 'fc2'): DirectWrite {
  const H = cfg.hiddenSize;
  const I = cfg.moe!.intermediateSize;
  const Im = shard.moeInterLocal,
    s = shard.moeInterStart;
  const p = `model.layers.${layer}.mlp.experts`;
  if (fc === 'fc1') {
    return {
      param: `${p}.w13_weight`,
      write: (dst, src, stream) => {
        checkSrc(`expert ${e} linear_fc1`, src, [2 * I, H]);
        stridedRead(viewOf(dst.reshape([dst.numel]), [H * 2 * Im], e * H * 2 * Im), src, [H, 2, Im], [1, I * H, H], s * H, stream);
      },
    };
  }
  return {
    param: `${p}.w2_weight`,
    write: (dst, src, stream) => {
      checkSrc(`expert ${e} linear_fc2`, src, [H, I]);
      stridedRead(viewOf(dst.reshape([dst.numel]), [Im * H], e * Im * H), src, [Im, H], [1, I], s, stream);
    },
  };
}
