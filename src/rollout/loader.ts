/**
 * Checkpoint-format loader of the rollout engine: maps each HF tensor (q/k/v, gate/up/
 * down, per-expert `mlp.experts.{e}.*_proj.weight` or the Transformers-5 fused
 * `mlp.experts.gate_up_proj` / `down_proj`) to the region of a packed runtime parameter
 * it fills on this TP rank, slices it (host tensors on the host, before any device copy;
 * device tensors on the device) and copies it into the parameter's PREPROCESSED layout.
 *
 * Every write is "take source reshaped to `view`, keep [start, start+len) of dim `dim`,
 * copy the (contiguous) result to element `dstOffset` of the parameter". E.g. the fused
 * gate_up_proj [E, 2I, H] seen as [E, 2, I, H] sliced on dim 2 is exactly the
 * preprocessed w13_weight [E, 2·Im_tp, H]; down_proj [E, H, I] sliced on dim 2 is w2_weight.
 * Qwen3.5 (runtime-params.ts): the wide gated q_proj fills the q rows of qkv_proj (each
 * head's query and gate together), the shared expert's gate / up the rows of its
 * gate_up_proj, the GDN tensors their own parameters cut to the rank's heads (gdn-shard.ts).
 */
import { Tensor, type Stream } from '../runtime/device/device-index.js';
import { cast, copy } from '../runtime/device/ops.js';
import { viewOf } from '../runtime/device/views.js';
import { CopyRanges } from '../runtime/device/copy-ranges.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import { describe } from '../runtime/device/dtype.js';
import { isMoeLayer, type ModelConfig } from '../model/config.js';
import { fusedExpertNames, perExpertNames, type HostTensor } from '../model/params.js';
import { toFloat32 } from '../model/host-float.js';
import type { RuntimeParam, RuntimeParams } from './runtime-params.js';
import type { TpShard } from './tp-shard.js';
import { isGdnLayer, qRowsPerHead } from './qwen35-layout.js';
import { gdnLocalTensors } from './gdn-shard.js';
import { contiguousTarget, writeSliceRange, type SliceGeometry } from './slice-range.js';

/**
 * What ReloadSession.load() accepts per HF name: a device tensor (fp32 or bf16), a
 * safetensors-style host tensor (F32, BF16, F16), or fp32 host data. Each is cast to the
 * dtype of the parameter it fills (weight-dtype.ts).
 */
export type WeightSource = Tensor | HostTensor | { shape: readonly number[]; data: Float32Array };

export interface SliceWrite {
  param: string;
  /** Part keys of the parameter this write fills. */
  parts: string[];
  view: number[];
  dim: number;
  start: number;
  len: number;
  dstOffset: number;
}

export interface HfEntry {
  shape: number[];
  writes: SliceWrite[];
}

/** HF name → its full shape and the writes it makes on this TP rank (both expert layouts). */
export function hfLoadPlan(cfg: ModelConfig, shard: TpShard): Map<string, HfEntry> {
  const { hiddenSize: H, headDim: D, numHeads: nH, numKvHeads: nKV } = cfg;
  const plan = new Map<string, HfEntry>();
  const whole = (name: string, shape: number[], param = name) =>
    plan.set(name, { shape, writes: [{ param, parts: ['all'], view: shape, dim: 0, start: 0, len: shape[0]!, dstOffset: 0 }] });
  whole('model.embed_tokens.weight', [cfg.vocabSize, H]);
  const qr = qRowsPerHead(cfg);
  for (let i = 0; i < cfg.numLayers; i++) {
    const p = `model.layers.${i}`;
    const qkv = `${p}.self_attn.qkv_proj.weight`;
    const rows = (name: string, shape: number[], param: string, part: string, start: number, len: number, dstRow: number) =>
      plan.set(name, { shape, writes: [{ param, parts: [part], view: shape, dim: 0, start, len, dstOffset: dstRow * shape[1]! }] });
    whole(`${p}.input_layernorm.weight`, [H]);
    whole(`${p}.post_attention_layernorm.weight`, [H]);
    if (isGdnLayer(cfg, i)) {
      for (const t of gdnLocalTensors(cfg, shard, i)) plan.set(t.name, { shape: t.shape, writes: t.writes });
    } else {
      whole(`${p}.self_attn.q_norm.weight`, [D]);
      whole(`${p}.self_attn.k_norm.weight`, [D]);
      // q rows per head: the query, then (Qwen3.5) its output gate — a head slice keeps both.
      const ql = qr * shard.headsLocal * D,
        hl = shard.headsLocal * D,
        kvl = shard.kvHeadsLocal * D;
      rows(`${p}.self_attn.q_proj.weight`, [qr * nH * D, H], qkv, 'q', qr * shard.headStart * D, ql, 0);
      rows(`${p}.self_attn.k_proj.weight`, [nKV * D, H], qkv, 'k', shard.kvHeadStart * D, kvl, ql);
      rows(`${p}.self_attn.v_proj.weight`, [nKV * D, H], qkv, 'v', shard.kvHeadStart * D, kvl, ql + kvl);
      const o = `${p}.self_attn.o_proj.weight`;
      plan.set(o, { shape: [H, nH * D], writes: [{ param: o, parts: ['all'], view: [H, nH * D], dim: 1, start: shard.headStart * D, len: hl, dstOffset: 0 }] });
    }
    if (isMoeLayer(cfg, i)) {
      const { numExperts: E, intermediateSize: I } = cfg.moe!;
      const Im = shard.moeInterLocal,
        s = shard.moeInterStart;
      const w13 = `${p}.mlp.experts.w13_weight`,
        w2 = `${p}.mlp.experts.w2_weight`;
      whole(`${p}.mlp.gate.weight`, [E, H]);
      for (let e = 0; e < E; e++) {
        const n = perExpertNames(i, e);
        plan.set(n.gate, { shape: [I, H], writes: [{ param: w13, parts: [`gate.${e}`], view: [I, H], dim: 0, start: s, len: Im, dstOffset: e * 2 * Im * H }] });
        plan.set(n.up, {
          shape: [I, H],
          writes: [{ param: w13, parts: [`up.${e}`], view: [I, H], dim: 0, start: s, len: Im, dstOffset: (e * 2 + 1) * Im * H }],
        });
        plan.set(n.down, { shape: [H, I], writes: [{ param: w2, parts: [`down.${e}`], view: [H, I], dim: 1, start: s, len: Im, dstOffset: e * H * Im }] });
      }
      const f = fusedExpertNames(i);
      const all = (k: string[]) => Array.from({ length: E }, (_, e) => k.map((x) => `${x}.${e}`)).flat();
      plan.set(f.gateUp, {
        shape: [E, 2 * I, H],
        writes: [{ param: w13, parts: all(['gate', 'up']), view: [E, 2, I, H], dim: 2, start: s, len: Im, dstOffset: 0 }],
      });
      plan.set(f.down, { shape: [E, H, I], writes: [{ param: w2, parts: all(['down']), view: [E, H, I], dim: 2, start: s, len: Im, dstOffset: 0 }] });
      const Is = cfg.moe!.sharedExpertIntermediateSize;
      if (Is !== undefined) {
        // The shared expert is a dense SwiGLU MLP, split over tp like one.
        const se = `${p}.mlp.shared_expert`;
        const Isl = shard.sharedInterLocal,
          s0 = shard.sharedInterStart;
        rows(`${se}.gate_proj.weight`, [Is, H], `${se}.gate_up_proj.weight`, 'gate', s0, Isl, 0);
        rows(`${se}.up_proj.weight`, [Is, H], `${se}.gate_up_proj.weight`, 'up', s0, Isl, Isl);
        const sd = `${se}.down_proj.weight`;
        plan.set(sd, { shape: [H, Is], writes: [{ param: sd, parts: ['all'], view: [H, Is], dim: 1, start: s0, len: Isl, dstOffset: 0 }] });
        whole(`${p}.mlp.shared_expert_gate.weight`, [1, H]);
      }
    } else {
      const I = cfg.intermediateSize,
        Il = shard.interLocal;
      const gu = `${p}.mlp.gate_up_proj.weight`;
      rows(`${p}.mlp.gate_proj.weight`, [I, H], gu, 'gate', shard.interStart, Il, 0);
      rows(`${p}.mlp.up_proj.weight`, [I, H], gu, 'up', shard.interStart, Il, Il);
      const d = `${p}.mlp.down_proj.weight`;
      plan.set(d, { shape: [H, I], writes: [{ param: d, parts: ['all'], view: [H, I], dim: 1, start: shard.interStart, len: Il, dstOffset: 0 }] });
    }
  }
  whole('model.norm.weight', [H]);
  if (!cfg.tieWordEmbeddings) whole('lm_head.weight', [cfg.vocabSize, H]);
  return plan;
}

/** The HF name that fills `part` of `p` (for messages about missing tensors). */
export function hfNameOfPart(plan: ReadonlyMap<string, HfEntry>, p: RuntimeParam, part: string): string {
  for (const [name, entry] of plan) {
    if (entry.writes.some((w) => w.param === p.name && w.parts.length === 1 && w.parts[0] === part)) return name;
  }
  return `${p.name} (${part})`;
}

const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

/**
 * fp32 host data of a HostTensor / HostParam (BF16 and F16 widened exactly, so a bf16
 * checkpoint loads into either engine precision), or null for a device tensor.
 */
function hostFloats(name: string, src: WeightSource): Float32Array | null {
  if (src instanceof Tensor) return null;
  if (src === null || typeof src !== 'object' || !('data' in src) || !('shape' in src)) {
    throw new InvalidArgumentError(
      `ReloadSession.load(): ${name} must be a Tensor, a HostTensor or { shape, data: Float32Array } but received ${describe(src)}.`,
      { tensor: name },
    );
  }
  if (src.data instanceof Float32Array) return src.data;
  if ('dtype' in src && src.data instanceof Uint8Array && (src.dtype === 'F32' || src.dtype === 'BF16' || src.dtype === 'F16')) {
    const d = src.data;
    if (src.dtype === 'F32' && d.byteOffset % 4 === 0) return new Float32Array(d.buffer, d.byteOffset, d.byteLength / 4);
    return toFloat32(d, src.dtype, { file: 'ReloadSession.load()', tensor: name });
  }
  throw new InvalidArgumentError(
    `ReloadSession.load(): ${name} is ${'dtype' in src ? String(src.dtype) : describe(src.data)}; the rollout engine loads F32, BF16 or F16 weights. HINT: convert it to F32 or BF16 before loading.`,
    { tensor: name },
  );
}

/**
 * `src` in the dtype of the parameter it is written to: itself when they match, else a
 * cast (fp32 → bf16 rounds to nearest even; bf16 → fp32 is exact) that the caller releases
 * once the writes from it are enqueued.
 */
function inDtypeOf(p: RuntimeParam, src: Tensor, stream: Stream): { t: Tensor; temp: boolean } {
  if (src.dtype === p.spec.dtype) return { t: src, temp: false };
  return { t: cast(src, p.spec.dtype, { stream }), temp: true };
}

/** Runs `body` with `src` in `p`'s dtype (see inDtypeOf). */
function withDtypeOf(p: RuntimeParam, src: Tensor, stream: Stream, body: (t: Tensor) => void, list?: CopyRanges): void {
  const { t, temp } = inDtypeOf(p, src, stream);
  try {
    body(t);
    // The copies `body` added from a cast temporary go out before it is released.
    if (temp) list?.enqueue(stream);
  } finally {
    if (temp) t.release(); // freed once the enqueued writes from it have run
  }
}

const FLOAT_DEVICE = ['fp32', 'bf16'];

function sliceHost(data: Float32Array, view: number[], dim: number, start: number, len: number): Float32Array {
  const outer = numel(view.slice(0, dim));
  const inner = numel(view.slice(dim + 1));
  const out = new Float32Array(outer * len * inner);
  for (let o = 0; o < outer; o++) {
    const from = (o * view[dim]! + start) * inner;
    out.set(data.subarray(from, from + len * inner), o * len * inner);
  }
  return out;
}

/** Checks `src` against the HF shape and writes its slices into the (preprocessed) parameters. */
export function loadOne(params: RuntimeParams, name: string, entry: HfEntry, src: WeightSource, stream: Stream): void {
  const host = hostFloats(name, src);
  const shape = src instanceof Tensor ? src.shape : src.shape;
  if (shape.length !== entry.shape.length || shape.some((d, i) => d !== entry.shape[i])) {
    throw new InvalidArgumentError(
      `ReloadSession.load(): ${name} has shape [${shape.join(', ')}] but the config needs [${entry.shape.join(', ')}] (the full, unsharded HF tensor).`,
      { tensor: name },
    );
  }
  if (src instanceof Tensor) {
    src.checkLive(name);
    if (!FLOAT_DEVICE.includes(src.dtype))
      throw new InvalidArgumentError(`ReloadSession.load(): ${name} is ${src.dtype}; the rollout engine loads fp32 or bf16 weights. HINT: cast() it first.`, {
        tensor: name,
      });
    if (src.device.ordinal !== params.device.ordinal) {
      throw new InvalidArgumentError(
        `ReloadSession.load(): ${name} is on device ${src.device.ordinal} but the engine is on device ${params.device.ordinal}. HINT: pass a host tensor or copyPeer() it first.`,
        { tensor: name },
      );
    }
  } else if (host!.length !== numel(entry.shape)) {
    throw new InvalidArgumentError(`ReloadSession.load(): ${name} holds ${host!.length} floats; [${entry.shape.join(', ')}] needs ${numel(entry.shape)}.`, {
      tensor: name,
    });
  }
  for (const w of entry.writes) {
    const p = params.get(w.param);
    const dstTensor = params.ensureAllocated(p);
    const n = (numel(w.view) / w.view[w.dim]!) * w.len;
    if (host) {
      const tmp = Tensor.fromArray(params.device, sliceHost(host, w.view, w.dim, w.start, w.len), [n], { stream });
      withDtypeOf(p, tmp, stream, (t) => copy(viewOf(dstTensor.reshape([dstTensor.numel]), [n], w.dstOffset), t, { stream }));
      tmp.release();
    } else {
      // Straight from the device source into the parameter: one strided read, no temporaries
      // (but the cast when the source's dtype is not the parameter's).
      withDtypeOf(p, src as Tensor, stream, (t) => writeSliceRange(dstTensor, t, 0, w, stream));
    }
    startReload(p);
    for (const k of w.parts) p.filled.add(k);
  }
}

/** First write of a reload: the parameter's old contents no longer count. */
function startReload(p: RuntimeParam): void {
  if (p.state !== 'preprocessed') {
    p.state = 'preprocessed';
    p.filled.clear();
  }
}

/**
 * Streaming reload: writes the flat element range [from, from + piece.numel) of the full
 * HF tensor `name` (a contiguous fp32 device piece) into the preprocessed parameters —
 * the part of each of the entry's writes that lies in the range (slice-range.ts). Marks
 * no part filled: call markLoaded() once every element of the tensor has been written.
 */
export function loadRange(params: RuntimeParams, name: string, entry: HfEntry, piece: Tensor, from: number, stream: Stream, batch?: CopyRanges): void {
  piece.checkLive(name);
  const total = numel(entry.shape);
  if (!FLOAT_DEVICE.includes(piece.dtype) || piece.device.ordinal !== params.device.ordinal) {
    throw new InvalidArgumentError(
      `ReloadSession.loadRange(): a piece of ${name} must be an fp32 or bf16 tensor on device ${params.device.ordinal} but is ${piece.dtype} on device ${piece.device.ordinal}.`,
      { tensor: name },
    );
  }
  if (!Number.isSafeInteger(from) || from < 0 || from + piece.numel > total) {
    throw new InvalidArgumentError(
      `ReloadSession.loadRange(): elements [${from}, ${from + piece.numel}) are outside ${name}, which has ${total} ([${entry.shape.join(', ')}]).`,
      { tensor: name },
    );
  }
  // The contiguous runs of every write of this piece: one copy op (or part of the caller's `batch`).
  const list = batch ?? new CopyRanges();
  for (const w of entry.writes) {
    const p = params.get(w.param);
    withDtypeOf(p, piece, stream, (t) => writeSliceRange(params.ensureAllocated(p), t, from, w, stream, list), list);
    startReload(p);
  }
  if (!batch) list.enqueue(stream);
}

/** Streaming reload: every element of the HF tensor of `entry` was written by loadRange(); its parts count as filled. */
export function markLoaded(params: RuntimeParams, entry: HfEntry): void {
  for (const w of entry.writes) {
    const p = params.get(w.param);
    startReload(p);
    for (const k of w.parts) p.filled.add(k);
  }
}

/** Streaming reload from a source that is already this rank's local shard: slice writes `geometry` into `param` (preprocessed). */
export function loadLocal(
  params: RuntimeParams,
  param: string,
  piece: Tensor,
  from: number,
  geometry: readonly SliceGeometry[],
  stream: Stream,
  batch?: CopyRanges,
): void {
  const p = params.get(param);
  piece.checkLive(param);
  if (!FLOAT_DEVICE.includes(piece.dtype) || piece.device.ordinal !== params.device.ordinal) {
    throw new InvalidArgumentError(
      `ReloadSession.loadLocalRange(): a piece for ${param} must be an fp32 or bf16 tensor on device ${params.device.ordinal} but is ${piece.dtype} on device ${piece.device.ordinal}.`,
      { parameter: param },
    );
  }
  const dst = params.ensureAllocated(p);
  const list = batch ?? new CopyRanges(); // the contiguous runs of every write of this piece: one copy op
  for (const g of geometry) {
    if (g.dstOffset + (numel(g.view) / g.view[g.dim]!) * g.len > dst.numel) {
      throw new InvalidArgumentError(
        `ReloadSession.loadLocalRange(): a write of ${g.len} rows at element ${g.dstOffset} does not fit ${param} (${dst.numel} elements on this rank).`,
        { parameter: param },
      );
    }
    withDtypeOf(p, piece, stream, (t) => writeSliceRange(dst, t, from, g, stream, list), list);
  }
  if (!batch) list.enqueue(stream);
  startReload(p);
}

/** Streaming reload: every part of `param` was written by loadLocal(). */
export function markLocalLoaded(params: RuntimeParams, param: string): void {
  const p = params.get(param);
  startReload(p);
  for (const k of p.spec.parts) p.filled.add(k);
}

/**
 * Streaming reload, zero copy: the view of the preprocessed parameter that elements
 * [from, from + count) of the source go to on this rank, when they form one contiguous
 * region of one parameter (`writes`: the source's slice writes, each with its parameter);
 * else null. The view has the parameter's dtype (bf16 for a matmul weight of a 'bfloat16'
 * engine): the caller fills it with that dtype's bytes (e.g. as a broadcast's receive buffer) and
 * later calls markLoaded / markLocalLoaded as for loadRange.
 */
export function rangeTarget(params: RuntimeParams, writes: ReadonlyArray<SliceGeometry & { param: string }>, from: number, count: number): Tensor | null {
  if (writes.length !== 1) return null;
  const w = writes[0]!;
  const at = contiguousTarget(w, from, count);
  if (at === null) return null;
  const p = params.get(w.param);
  const dst = params.ensureAllocated(p);
  if (at + count > dst.numel) return null;
  startReload(p);
  return viewOf(dst.reshape([dst.numel]), [count], at);
}
