/**
 * Differentiable ops over tape Vars: each runs its forward kernel(s) on the tape's
 * stream, with the implementation the model-patch registry picks (fast, or the
 * reference kernel when patches are off), and records its backward.
 *
 * A bf16 weight (a bf16 trainer's compute copy, train/mixed-precision.ts) makes linear(),
 * groupedLinear() and embedding() mixed precision: the matmul kernels take one input dtype,
 * so the input is cast to bf16 (that copy is what backward reads) and the output is fp32
 * (fp32 accumulation); backward casts dY to bf16 and returns fp32 dX and dW, so the
 * weight's gradient stays fp32. fp32 weights run exactly as before.
 */
import { add as addOp, cast, matmul, type Tensor } from '../runtime/device/device-index.js';
import type { KernelImpl } from '../runtime/patches.js';
import { registerPatch } from '../runtime/patches.js';
import { Var, type Tape } from './autograd.js';
import * as K from './kernels/index.js';

/** The patches of the qwen3 / qwen3_moe families, each a fast kernel over a reference one. */
export const PATCHES = {
  embedding: 'qwen3.embedding',
  rmsNorm: 'qwen3.rms_norm',
  linear: 'qwen3.linear',
  rope: 'qwen3.rope',
  attention: 'qwen3.attention',
  swiglu: 'qwen3.swiglu',
  crossEntropy: 'qwen3.cross_entropy',
  router: 'qwen3_moe.router',
  experts: 'qwen3_moe.grouped_experts',
} as const;

const DESCRIPTIONS: Record<keyof typeof PATCHES, string> = {
  embedding: 'vectorised embedding lookup and scatter-add backward',
  rmsNorm: 'fused RMSNorm forward/backward (also q_norm / k_norm)',
  linear: 'packed, cache-blocked AVX2/FMA matmul for every projection',
  rope: 'rotary embedding with precomputed per-position angles',
  attention: 'fused causal grouped-query attention with saved log-sum-exp',
  swiglu: 'fused SiLU(gate) * up, including the fused gate_up layout',
  crossEntropy: 'fused log-softmax + cross-entropy',
  router: 'fused softmax + top-k router',
  experts: 'grouped matmul over experts with device-side token counts (no host sync)',
};

let registered = false;
/** Registers the model patches once per thread. */
export function registerModelPatches(): void {
  if (registered) return;
  registered = true;
  for (const key of Object.keys(PATCHES) as Array<keyof typeof PATCHES>) {
    const name = PATCHES[key];
    registerPatch({ name, families: name.startsWith('qwen3_moe.') ? ['qwen3_moe'] : ['qwen3', 'qwen3_moe'], description: DESCRIPTIONS[key] });
  }
}

function opts(tape: Tape, patch: string): { stream: Tape['stream']; impl: KernelImpl } {
  return { stream: tape.stream, impl: tape.impl(patch) };
}

const need = (v: Var) => v.requiresGrad;

/** A view with another shape (no copy); the gradient is reshaped back. */
export function reshape(tape: Tape, x: Var, shape: readonly number[]): Var {
  const y = new Var(x.value.reshape(shape), false, x.name);
  tape.record('reshape', [x], [y], ([dy]) => [dy!.reshape(x.value.shape)]);
  return y;
}

export function add(tape: Tape, a: Var, b: Var): Var {
  const y = tape.result(addOp(a.value, b.value, { stream: tape.stream }));
  tape.record('add', [a, b], [y], ([dy]) => [dy, dy]);
  return y;
}

/** `t` in `dtype` (itself when it already is; else a tape-owned cast). */
function as(tape: Tape, t: Tensor, dtype: Tensor['dtype']): Tensor {
  return t.dtype === dtype ? t : tape.own(cast(t, dtype, { stream: tape.stream }));
}

/**
 * x [T, in] · w[out, in]^T → [T, out] (torch.nn.Linear without bias). A bf16 w: x is cast
 * to bf16 for the matmul and backward (see the header); y, dX and dW are fp32.
 */
export function linear(tape: Tape, x: Var, w: Var): Var {
  const o = opts(tape, PATCHES.linear);
  const xc = as(tape, x.value, w.value.dtype);
  // Options as whole literals, not { transB: true, ...o }: a spread adds the keys one map transition
  // at a time, and those maps live only while such an object does, so a GC between steps freed
  // them and deoptimised matmul() (and its callers) for the next step's fresh maps.
  const y = tape.result(matmul(xc, w.value, { transB: true, stream: o.stream, impl: o.impl }));
  tape.record('linear', [x, w], [y], ([dy]) => {
    const g = as(tape, dy!, w.value.dtype);
    return [
      need(x) ? tape.own(matmul(g, w.value, o)) : undefined,
      need(w) ? tape.own(matmul(g, xc, { transA: true, stream: o.stream, impl: o.impl })) : undefined,
    ];
  });
  return y;
}

/** The rows of `table` at `ids`, fp32 whatever the table's dtype (a bf16 table's rows are exact in fp32). */
export function embedding(tape: Tape, ids: Tensor, table: Var): Var {
  const o = opts(tape, PATCHES.embedding);
  const y = tape.result(as(tape, tape.own(K.embedding(ids, table.value, o)), 'fp32'));
  tape.record('embedding', [table], [y], ([dy]) => [tape.own(K.embeddingBackward(dy!, ids, table.value.shape[0]!, o))]);
  return y;
}

/** RMSNorm over the last dim of x [N, H] with weight [H]. */
export function rmsNorm(tape: Tape, x: Var, w: Var, eps: number): Var {
  const o = opts(tape, PATCHES.rmsNorm);
  const r = K.rmsNorm(x.value, w.value, eps, o);
  tape.own(r.rstd);
  const y = tape.result(r.y);
  tape.record('rmsNorm', [x, w], [y], ([dy]) => {
    const g = K.rmsNormBackward(dy!, x.value, w.value, r.rstd, o);
    return [tape.own(g.dx), tape.own(g.dw)];
  });
  return y;
}

/** Rotary embedding of x [T, heads, D] (or [B, S, heads, D]) at `positions`, by `table` (rope-scaling.ts, over D). */
export function rope(tape: Tape, x: Var, positions: Tensor, table: K.RopeTable): Var {
  const o = opts(tape, PATCHES.rope);
  const y = tape.result(K.rope(x.value, positions, table, o));
  tape.record('rope', [x], [y], ([dy]) => [tape.own(K.ropeBackward(dy!, positions, table, o))]);
  return y;
}

/** Causal grouped-query attention, q [B, S, nH, D], k and v [B, S, nKV, D]. */
export function attention(tape: Tape, q: Var, k: Var, v: Var): Var {
  const o = opts(tape, PATCHES.attention);
  const r = K.attention(q.value, k.value, v.value, o);
  tape.own(r.lse);
  const y = tape.result(r.o);
  tape.record('attention', [q, k, v], [y], ([dO]) => {
    const g = K.attentionBackward(dO!, q.value, k.value, v.value, r.o, r.lse, o);
    return [tape.own(g.dq), tape.own(g.dk), tape.own(g.dv)];
  });
  return y;
}

export function swiglu(tape: Tape, gate: Var, up: Var): Var {
  const o = opts(tape, PATCHES.swiglu);
  const y = tape.result(K.swiglu(gate.value, up.value, o));
  tape.record('swiglu', [gate, up], [y], ([dh]) => {
    const g = K.swigluBackward(dh!, gate.value, up.value, o);
    return [tape.own(g.dGate), tape.own(g.dUp)];
  });
  return y;
}

/** SwiGLU of a fused [N, 2I] gate‖up tensor → [N, I]. */
export function swigluFused(tape: Tape, gateUp: Var): Var {
  const o = opts(tape, PATCHES.swiglu);
  const y = tape.result(K.swigluFused(gateUp.value, o));
  tape.record('swigluFused', [gateUp], [y], ([dh]) => [tape.own(K.swigluFusedBackward(dh!, gateUp.value, o))]);
  return y;
}

export interface MoeWeights {
  /** Router [E, H]. */
  router: Var;
  /** Transformers-5 fused experts gate_up_proj [E, 2I, H]. */
  gateUp: Var;
  /** down_proj [E, H, I]. */
  down: Var;
}

/**
 * Replacements for the grouped expert projections inside the MoE block (LoRA on fused
 * experts): called with the dispatched tokens `xs` [T·k, in], the fused weight and the
 * device-side expert offsets; return the projection [T·k, out].
 */
export interface MoeAdapters {
  gateUp(tape: Tape, xs: Var, weight: Var, offsets: Tensor): Var;
  down(tape: Tape, xs: Var, weight: Var, offsets: Tensor): Var;
}

/**
 * A Qwen3-MoE sparse block on x [T, H]: softmax router, top-k (optionally
 * renormalised), tokens dispatched to experts by device-side counts, grouped
 * matmuls through gate_up → SwiGLU → down, weighted combine. No host sync.
 */
export function moe(tape: Tape, x: Var, w: MoeWeights, topK: number, renorm: boolean, adapters?: Partial<MoeAdapters>): Var {
  const ro = opts(tape, PATCHES.router);
  const eo = opts(tape, PATCHES.experts);
  const E = w.router.value.shape[0]!;
  const logits = linear(tape, x, w.router);
  const r = K.routerTopK(logits.value, topK, renorm, ro);
  tape.own(r.probs);
  tape.own(r.indices);
  tape.routerTaps?.push({ logits, probs: r.probs, indices: r.indices });
  const weights = tape.result(r.weights);
  tape.record('router', [logits], [weights], ([dW]) => [tape.own(K.routerBackward(dW!, r.probs, r.indices, renorm, ro))]);

  const d = K.moeDispatch(r.indices, E, eo);
  for (const t of [d.counts, d.offsets, d.order]) tape.own(t);
  const xs = tape.result(K.moeGather(x.value, d.order, topK, eo));
  tape.record('moeGather', [x], [xs], ([dXs]) => [tape.own(K.moeGatherBackward(dXs!, d.order, topK, eo))]);

  const grouped = (inp: Var, weight: Var, name: string): Var => {
    const hook = name === 'experts.gate_up' ? adapters?.gateUp : adapters?.down;
    if (hook) return hook(tape, inp, weight, d.offsets);
    return groupedLinear(tape, inp, weight, d.offsets, name);
  };
  const gu = grouped(xs, w.gateUp, 'experts.gate_up');
  const act = swigluFused(tape, gu);
  const ys = grouped(act, w.down, 'experts.down');

  const y = tape.result(K.moeCombine(ys.value, d.order, weights.value, eo));
  tape.record('moeCombine', [ys, weights], [y], ([dy]) => {
    const g = K.moeCombineBackward(dy!, ys.value, d.order, weights.value, eo);
    return [tape.own(g.dYs), tape.own(g.dWeights)];
  });
  return y;
}

/** Per-token cross-entropy [T] of logits [T, V] (0 where the target is -100). */
export function crossEntropy(tape: Tape, logits: Var, targets: Tensor): Var {
  const o = opts(tape, PATCHES.crossEntropy);
  const r = K.crossEntropy(logits.value, targets, o);
  tape.own(r.lse);
  const loss = tape.result(r.loss);
  tape.record('crossEntropy', [logits], [loss], ([dl]) => [tape.own(K.crossEntropyBackward(dl!, logits.value, targets, r.lse, o))]);
  return loss;
}

/**
 * Per-expert x · W[e]ᵀ over tokens grouped by expert: xs [N, in] (rows of expert e at
 * offsets[e]..offsets[e+1], device-side), weight [E, out, in] → [N, out]. A bf16 weight:
 * mixed precision as in linear().
 */
export function groupedLinear(tape: Tape, xs: Var, weight: Var, offsets: Tensor, name = 'groupedLinear'): Var {
  const eo = opts(tape, PATCHES.experts);
  const xc = as(tape, xs.value, weight.value.dtype);
  // Whole literals, no spread: see linear().
  const y = tape.result(K.groupedMatmul(xc, weight.value, offsets, { transB: true, stream: eo.stream, impl: eo.impl }));
  tape.record(name, [xs, weight], [y], ([dy]) => {
    const dyc = as(tape, dy!, weight.value.dtype);
    const g = K.groupedMatmulBackward(dyc, xc, weight.value, offsets, { transB: true, dX: need(xs), dW: need(weight), stream: eo.stream, impl: eo.impl });
    return [g.dX ? tape.own(g.dX) : undefined, g.dW ? tape.own(g.dW) : undefined];
  });
  return y;
}
