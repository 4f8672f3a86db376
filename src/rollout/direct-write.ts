/**
 * Direct writes into the engine's PROCESSED (runtime) layout, skipping the loader's
 * preprocessed stage and the post-load processing: what a colocated weight sync and a
 * LoRA adapter sync do (through a DirectSession). Each write is one strided device read
 * from a full source tensor into a contiguous region of the rank's local runtime tensor,
 * made from the rank's weight slot of that tensor (weight-slots.ts, built from the
 * loader's plan, so the TP slicing is the loader's, written once):
 *
 * - HF tensors whose runtime layout equals the preprocessed one (everything but the
 *   experts): the slot's slice write (view, dim, start, len, dstOffset).
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
import { fusedExpertNames } from '../model/params.js';
import { hfLoadPlan, type HfEntry, type SliceWrite } from './loader.js';
import { slotsOfEntry, type SlotDescriptor } from './weight-slots.js';
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
const PER_EXPERT = /^model\.layers\.\d+\.mlp\.experts\.\d+\./;

/** The source must have the full HF shape and the dtype of the parameter it is read into (a strided read does not convert). */
function checkSrc(name: string, src: Tensor, shape: readonly number[], dst: Tensor): void {
  if (src.dtype !== dst.dtype || src.shape.length !== shape.length || src.shape.some((d, i) => d !== shape[i])) {
    throw new InvalidArgumentError(
      `Direct write of ${name}: expected a ${dst.dtype} [${shape.join(', ')}] tensor but received ${src.dtype} [${src.shape.join(', ')}].${src.dtype !== dst.dtype ? ` HINT: the engine holds this parameter in ${dst.dtype} (its weight dtype); cast() the source first.` : ''}`,
      { tensor: name },
    );
  }
}

/**
 * The direct write of a slot (weight-slots.ts): the full HF tensor `slot.hf` read into
 * the slot's region of its parameter, in the processed layout. A slot whose slice write
 * holds in the processed layout is one strided read (with `range`, so pieces can be
 * streamed); an expert-swap slot reads the region transposed.
 */
export function slotWrite(slot: SlotDescriptor): DirectWrite {
  const { hf: name, shape, region: r } = slot;
  if (slot.transform === 'expert-swap') {
    if (r.view.length === 4) {
      // gate_up_proj seen as [E, 2, I, H]: dst[e, h, j, i] = src[e, j·I + s + i, h].
      const [E, , I, H] = r.view as [number, number, number, number];
      return {
        param: slot.param,
        write: (dst, src, stream) => {
          checkSrc(name, src, shape, dst);
          stridedRead(dst.reshape([dst.numel]), src, [E, H, 2, r.len], [2 * I * H, 1, I * H, H], r.start * H, stream);
        },
      };
    }
    if (r.view.length !== 3) {
      throw new InvalidArgumentError(
        `Direct write of ${name}: a per-expert HF tensor cannot be written in the processed layout alone. HINT: pass the fused mlp.experts.gate_up_proj / down_proj, or do a full reload.`,
        { tensor: name },
      );
    }
    // down_proj [E, H, I]: dst[e, i, h] = src[e, h, s + i].
    const [E, H, I] = r.view as [number, number, number];
    return {
      param: slot.param,
      write: (dst, src, stream) => {
        checkSrc(name, src, shape, dst);
        stridedRead(dst.reshape([dst.numel]), src, [E, r.len, H], [H * I, 1, I], r.start, stream);
      },
    };
  }
  const r0 = slot.region;
  const range: SliceWrite = { param: slot.param, parts: slot.parts, view: r0.view, dim: r0.dim, start: r0.start, len: r0.len, dstOffset: slot.dstOffset };
  const outer = numel(r.view.slice(0, r.dim));
  const inner = numel(r.view.slice(r.dim + 1));
  return {
    param: slot.param,
    range,
    write: (dst, src, stream) => {
      checkSrc(name, src, shape, dst);
      const n = outer * r.len * inner;
      stridedRead(
        viewOf(dst.reshape([dst.numel]), [n], slot.dstOffset),
        src,
        [outer, r.len, inner],
        [r.view[r.dim]! * inner, inner, 1],
        r.start * inner,
        stream,
      );
    },
  };
}

/**
 * Direct write of Megatron expert e's full linear_fc1 [2I, H] (gate ‖ up) or linear_fc2
 * [H, I] through the expert-swap slot of its fused HF tensor: the slot's map restricted to
 * expert e's contiguous block of w13 / w2.
 */
export function expertSlotWrite(slot: SlotDescriptor, e: number): DirectWrite {
  const r = slot.region;
  if (slot.transform !== 'expert-swap')
    throw new InvalidArgumentError(`Direct write of expert ${e}: ${slot.hf} is not a fused expert tensor (its slot is '${slot.transform}').`, {
      tensor: slot.hf,
    });
  const Im = r.len,
    s = r.start;
  if (r.view.length === 4) {
    const [, , I, H] = r.view as [number, number, number, number];
    return {
      param: slot.param,
      write: (dst, src, stream) => {
        checkSrc(`expert ${e} linear_fc1`, src, [2 * I, H], dst);
        stridedRead(viewOf(dst.reshape([dst.numel]), [H * 2 * Im], e * H * 2 * Im), src, [H, 2, Im], [1, I * H, H], s * H, stream);
      },
    };
  }
  const [, H, I] = r.view as [number, number, number];
  return {
    param: slot.param,
    write: (dst, src, stream) => {
      checkSrc(`expert ${e} linear_fc2`, src, [H, I], dst);
      stridedRead(viewOf(dst.reshape([dst.numel]), [Im * H], e * Im * H), src, [Im, H], [1, I], s, stream);
    },
  };
}

/** The direct writes of the full HF tensor `name` on the TP rank `shard` (plan = hfLoadPlan(cfg, shard)): its slots' writes. */
export function hfDirectWrites(cfg: ModelConfig, shard: TpShard, plan: ReadonlyMap<string, HfEntry>, name: string): DirectWrite[] {
  const entry = plan.get(name);
  if (!entry) throw new InvalidArgumentError(`Direct write: unknown HF tensor ${JSON.stringify(name)} for this ${cfg.modelType} config.`, { tensor: name });
  if (PER_EXPERT.test(name)) {
    throw new InvalidArgumentError(
      `Direct write of ${name}: per-expert HF expert tensors cannot be written in the processed layout one by one. HINT: pass the fused mlp.experts.gate_up_proj / down_proj, or Megatron linear_fc1 / linear_fc2 per expert (expertDirectWrite), or do a full reload.`,
      { tensor: name },
    );
  }
  return slotsOfEntry(cfg, shard, name, entry).map(slotWrite);
}

/** Direct write of Megatron expert e's full linear_fc1 [2I, H] ('fc1') or linear_fc2 [H, I] ('fc2') of `layer`. */
export function expertDirectWrite(cfg: ModelConfig, shard: TpShard, layer: number, e: number, fc: 'fc1' | 'fc2'): DirectWrite {
  const f = fusedExpertNames(layer);
  const hf = fc === 'fc1' ? f.gateUp : f.down;
  const entry = hfLoadPlan(cfg, shard).get(hf);
  if (!entry) throw new InvalidArgumentError(`Direct write of expert ${e}: layer ${layer} has no ${hf} in this ${cfg.modelType} config.`, { tensor: hf });
  return expertSlotWrite(slotsOfEntry(cfg, shard, hf, entry)[0]!, e);
}
