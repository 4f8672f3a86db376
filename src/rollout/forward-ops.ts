/**
 * The building blocks both engine forwards (forward.ts for Qwen3 / Qwen3-MoE,
 * forward-qwen35.ts for Qwen3.5) share: every temporary goes to `scratch` (released after
 * the step), kernels run with the model patches' implementation (the trainer's), weights are
 * read in the processed layout, and the routed-experts block runs on w13 / w2 in the
 * grouped-matmul layout. A 'bfloat16' engine's matmul weights are bf16 (weight-dtype.ts):
 * linear(), head() and the experts cast the activations to bf16 for the matmul only; every
 * matmul accumulates and returns fp32.
 */
import { Tensor } from '../runtime/device/device-index.js';
import { cast, matmul } from '../runtime/device/ops.js';
import { viewOf } from '../runtime/device/views.js';
import { patchImpl } from '../runtime/patches.js';
import * as K from '../model/kernels/index.js';
import { PATCHES, registerModelPatches } from '../model/functional.js';
import type { ForwardContext, ForwardInput } from './forward.js';

export interface ForwardOps {
  /** Keeps `t` for release after the step and returns it. */
  own<X extends Tensor>(t: X): X;
  /** Kernel options with the patch's implementation. */
  o(patch: string): { stream: ForwardContext['stream']; impl: K.KernelImpl };
  /** Runtime parameter `name` in the processed layout. */
  w(name: string): Tensor;
  /** Rows [start, start + count) of a 2-D tensor (a view). */
  rowsOf(t: Tensor, start: number, count: number): Tensor;
  /** x · weightᵀ (fp32 out; x is cast to a bf16 weight's dtype first, see weight-dtype.ts). */
  linear(x: Tensor, weight: Tensor): Tensor;
  /** The LM head: x · weightᵀ like linear(), but the logits are the caller's (not released with the step). */
  head(x: Tensor, weight: Tensor): Tensor;
  /** The token embedding of ids, fp32 whatever the table's dtype. */
  embed(ids: Tensor): Tensor;
  /** RMSNorm of t by runtime parameter `weight` (or a tensor). */
  norm(t: Tensor, weight: string | Tensor): Tensor;
  /** Sums t over the tp group in place (nothing at tp = 1). */
  allReduce(t: Tensor): void;
  /** Routed experts of layer prefix `pre` on h [T, H]: router top-k, grouped SwiGLU experts, combine. */
  routedExperts(h: Tensor, pre: string): Tensor;
  /**
   * Causal attention of q [T, nH·D] over k / v [T, nKV·D]: this step's keys / values are written to KV-cache layer
   * `cacheLayer` (when the input has a cache and `cacheWritten` is not set: the op that made k / v wrote them),
   * then prefill attends within the batch and decode to the cache.
   */
  attend(inp: ForwardInput, cacheLayer: number, q: Tensor, k: Tensor, v: Tensor, nH: number, nKV: number, cacheWritten?: boolean): Tensor;
}

export function forwardOps(ctx: ForwardContext, scratch: Tensor[], pending: Promise<void>[]): ForwardOps {
  registerModelPatches();
  const { cfg, params, shard, comm, stream } = ctx;
  const own = <X extends Tensor>(t: X): X => (scratch.push(t), t);
  const o = (patch: string) => ({ stream, impl: patchImpl(patch) });
  const w = (name: string) => params.get(name).view('processed');
  const rowsOf = (t: Tensor, start: number, count: number): Tensor => viewOf(t, [count, t.shape[1]!], start * t.shape[1]!);
  // The matmul kernels take one input dtype: activations meet a bf16 weight as bf16 (fp32 accumulation and output).
  const like = (x: Tensor, weight: Tensor) => (x.dtype === weight.dtype ? x : own(cast(x, weight.dtype, { stream })));
  // Whole option literals, no spread: a spread's keys are added one map transition at a time, and
  // those maps die with the last such object, so a GC between steps deoptimised matmul() and its callers.
  const head = (x: Tensor, weight: Tensor) => matmul(like(x, weight), weight, { transB: true, stream, impl: patchImpl(PATCHES.linear) });
  const linear = (x: Tensor, weight: Tensor) => own(head(x, weight));
  const embed = (ids: Tensor) => {
    const e = own(K.embedding(ids, w('model.embed_tokens.weight'), o(PATCHES.embedding)));
    return e.dtype === 'fp32' ? e : own(cast(e, 'fp32', { stream }));
  };
  const norm = (t: Tensor, weight: string | Tensor) => {
    const r = K.rmsNorm(t, typeof weight === 'string' ? w(weight) : weight, cfg.rmsNormEps, o(PATCHES.rmsNorm));
    own(r.rstd);
    return own(r.y);
  };
  const allReduce = (t: Tensor) => {
    if (comm && shard.tpSize > 1) pending.push(comm.allReduce(t, t, 'sum', stream));
  };
  const routedExperts = (h: Tensor, pre: string): Tensor => {
    const eo = o(PATCHES.experts);
    const logits = linear(h, w(`${pre}.mlp.gate.weight`));
    const r = K.routerTopK(logits, cfg.moe!.topK, cfg.moe!.normTopkProb, o(PATCHES.router));
    own(r.probs);
    own(r.indices);
    own(r.weights);
    const d = K.moeDispatch(r.indices, cfg.moe!.numExperts, eo);
    own(d.counts);
    own(d.offsets);
    own(d.order);
    const xs = own(K.moeGather(h, d.order, cfg.moe!.topK, eo));
    const w13 = w(`${pre}.mlp.experts.w13_weight`),
      w2 = w(`${pre}.mlp.experts.w2_weight`);
    const gu = own(K.groupedMatmul(like(xs, w13), w13, d.offsets, { transB: false, stream: eo.stream, impl: eo.impl }));
    const act = own(K.swigluFused(gu, o(PATCHES.swiglu)));
    const ys = own(K.groupedMatmul(like(act, w2), w2, d.offsets, { transB: false, stream: eo.stream, impl: eo.impl }));
    return own(K.moeCombine(ys, d.order, r.weights, eo));
  };
  const attend = (inp: ForwardInput, cacheLayer: number, q: Tensor, k: Tensor, v: Tensor, nH: number, nKV: number, cacheWritten = false): Tensor => {
    const { batch: B, seqLen: S } = inp;
    const D = cfg.headDim;
    if (inp.kv && !cacheWritten) inp.kv.cache.write(cacheLayer, k, v, inp.kv.cachePos, S, stream);
    if (inp.mode === 'prefill') {
      const r = K.attention(q.reshape([B, S, nH, D]), k.reshape([B, S, nKV, D]), v.reshape([B, S, nKV, D]), o(PATCHES.attention));
      own(r.lse);
      return own(r.o);
    }
    const c = inp.kv!.cache.views(cacheLayer, B);
    return own(K.attentionDecode(q.reshape([B, 1, nH, D]), c.k, c.v, inp.lengths!, { stream }));
  };
  return { own, o, w, rowsOf, linear, head, embed, norm, allReduce, routedExperts, attend };
}
