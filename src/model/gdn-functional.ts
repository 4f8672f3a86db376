/**
 * Differentiable Gated DeltaNet ops over tape Vars (the kernels of
 * src/model/kernels/gdn.ts), on the tape's stream with the implementation
 * ASCENT_GDN_BACKEND selects. Model wiring (Qwen3.5 layers) builds on these.
 */
import { Tensor } from '../runtime/device/tensor.js';
import { Var, type Tape } from './autograd.js';
import * as K from './kernels/index.js';

function opts(tape: Tape): { stream: Tape['stream']; impl: K.KernelImpl } {
  return { stream: tape.stream, impl: K.gdnBackendImpl() };
}

export interface GdnTapeOptions {
  /** 2-D padding mask [B, T] int32 (a 4-D attention mask is refused). */
  mask?: Tensor;
  /** 'chunked' (default) or 'recurrent'. */
  mode?: 'chunked' | 'recurrent';
  useQkL2norm?: boolean;
}

/** The gated delta rule from a zero state: o [B, T, Hv, Dv]; gradients to q, k, v, g, beta. */
export function gatedDeltaRule(tape: Tape, q: Var, k: Var, v: Var, g: Var, beta: Var, options: GdnTapeOptions = {}): Var {
  const o = opts(tape);
  const r = K.gatedDeltaRule(q.value, k.value, v.value, g.value, beta.value, { ...o, ...options });
  tape.own(r.finalState);
  const y = tape.result(r.o);
  tape.record('gatedDeltaRule', [q, k, v, g, beta], [y], ([dy]) => {
    const gr = K.gatedDeltaRuleBackward(dy!, q.value, k.value, v.value, g.value, beta.value, { ...o, mask: options.mask, useQkL2norm: options.useQkL2norm });
    tape.own(gr.dInitialState);
    return [tape.own(gr.dq), tape.own(gr.dk), tape.own(gr.dv), tape.own(gr.dg), tape.own(gr.dbeta)];
  });
  return y;
}

/**
 * Causal depthwise conv1d + SiLU from a zero state, x [B, T, C], w [C, K] or HF's Conv1d weight
 * [C, 1, K]. The [C, K] view of w is taken when each pass runs, never kept from the forward: a
 * sharded strategy (fsdp2) frees a block's gathered parameters after its forward and hands the
 * Var a re-gathered value for backward, so a view made at forward time would read freed memory.
 */
export function causalConv1d(tape: Tape, x: Var, w: Var): Var {
  const o = opts(tape);
  const taps = (): Tensor => (w.value.shape.length === 3 ? w.value.reshape([w.value.shape[0]!, w.value.shape[2]!]) : w.value);
  const r = K.causalConv1d(x.value, taps(), o);
  tape.own(r.state);
  const y = tape.result(r.y);
  tape.record('causalConv1d', [x, w], [y], ([dy]) => {
    const gr = K.causalConv1dBackward(dy!, x.value, taps(), o);
    tape.own(gr.dState);
    return [tape.own(gr.dx), tape.own(gr.dw).reshape(w.value.shape)];
  });
  return y;
}

/** Gated RMSNorm y = RMSNorm(x) * w * silu(z). */
export function gatedRmsNorm(tape: Tape, x: Var, z: Var, w: Var, eps: number): Var {
  const o = opts(tape);
  const r = K.gatedRmsNorm(x.value, z.value, w.value, eps, o);
  tape.own(r.rstd);
  const y = tape.result(r.y);
  tape.record('gatedRmsNorm', [x, z, w], [y], ([dy]) => {
    const gr = K.gatedRmsNormBackward(dy!, x.value, z.value, w.value, r.rstd, o);
    return [tape.own(gr.dx), tape.own(gr.dz), tape.own(gr.dw)];
  });
  return y;
}

/** GDN gating: g = -exp(aLog) softplus(a + dtBias), beta = sigmoid(b); a missing output gradient counts as zero. */
export function gdnGating(tape: Tape, a: Var, b: Var, aLog: Var, dtBias: Var): { g: Var; beta: Var } {
  const o = opts(tape);
  const r = K.gdnGating(a.value, b.value, aLog.value, dtBias.value, o);
  const g = tape.result(r.g),
    beta = tape.result(r.beta);
  tape.record('gdnGating', [a, b, aLog, dtBias], [g, beta], ([dg, db]) => {
    const z = (): Tensor => tape.own(Tensor.zeros(a.value.device, a.value.shape, 'fp32', { stream: tape.stream }));
    const gr = K.gdnGatingBackward(dg ?? z(), db ?? z(), a.value, b.value, aLog.value, dtBias.value, o);
    return [tape.own(gr.da), tape.own(gr.db), tape.own(gr.daLog), tape.own(gr.ddtBias)];
  });
  return { g, beta };
}
