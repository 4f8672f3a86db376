/**
 * The Qwen3.5 pieces of megatron's decoder (model.ts), on Megatron-named local parameters:
 * - the Gated DeltaNet token mixer, run WHOLE on every TP rank (its tensors are replicated,
 *   specs.ts): the reference Megatron fallback has no tensor- or context-parallel split of the
 *   GDN layer (in_proj_qkv → causal conv, the gated delta rule's recurrence over heads, the
 *   gated norm), so each TP rank computes the same output and the same (complete) gradients;
 *   the residual stream is replicated over tp, so its gradient needs no reduction either;
 * - the shared expert of a Qwen3.5-MoE layer: a tensor-parallel SwiGLU MLP (linear_fc1 gate ‖ up
 *   column parallel, linear_fc2 row parallel) scaled per token by sigmoid(x · gate_weight), the
 *   gate replicated.
 * The math is src/model/qwen3_5.ts's and qwen35-moe.ts's, through the same tape ops.
 */
import type { Tape, Var } from '../../model/autograd.js';
import type { ModelConfig } from '../../model/config.js';
import * as F from '../../model/functional.js';
import { causalConv1d, gatedDeltaRule, gatedRmsNorm, gdnGating } from '../../model/gdn-functional.js';
import { gdnConvDim } from '../../model/params-qwen35.js';
import type { Batch } from '../../model/qwen3.js';
import { scaleRows } from '../../model/qwen35-moe.js';
import { sigmoid, splitLast, zeroPadRows } from '../../model/qwen35-ops.js';
import type { ParallelMode } from './parallel-mode.js';

/** What the blocks need of the model: a local parameter and the parallel linear (with its LoRA hook). */
export interface BlockAccess {
  param(name: string): Var;
  linear(tape: Tape, x: Var, name: string, mode: ParallelMode): Var;
}

/** The Gated DeltaNet of layer prefix `att` (`decoder.layers.i.self_attention`) on h [T, H], whole on this rank. */
export function gatedDeltaNet(m: BlockAccess, cfg: ModelConfig, tape: Tape, h: Var, att: string, batch: Batch): Var {
  const { batch: B, seqLen: S } = batch;
  const T = B * S;
  const { numKeyHeads: Hk, numValueHeads: Hv, keyHeadDim: Dk, valueHeadDim: Dv } = cfg.qwen35!.linear;
  const C = gdnConvDim(cfg);
  const lin = (x: Var, name: string) => m.linear(tape, x, `${att}.${name}.weight`, 'replicated');
  let qkvRows = lin(h, 'in_proj_qkv');
  if (batch.mask) qkvRows = zeroPadRows(tape, qkvRows, batch.mask);
  const conv = causalConv1d(tape, F.reshape(tape, qkvRows, [B, S, C]), m.param(`${att}.conv1d.weight`));
  const [q, k, v] = splitLast(tape, F.reshape(tape, conv, [T, C]), [Hk * Dk, Hk * Dk, Hv * Dv]) as [Var, Var, Var];
  const z = lin(h, 'in_proj_z');
  const b = F.reshape(tape, lin(h, 'in_proj_b'), [B, S, Hv]);
  const a = F.reshape(tape, lin(h, 'in_proj_a'), [B, S, Hv]);
  const { g, beta } = gdnGating(tape, a, b, m.param(`${att}.A_log`), m.param(`${att}.dt_bias`));
  const o = gatedDeltaRule(tape, F.reshape(tape, q, [B, S, Hk, Dk]), F.reshape(tape, k, [B, S, Hk, Dk]), F.reshape(tape, v, [B, S, Hv, Dv]), g, beta, {
    useQkL2norm: true,
    ...(batch.mask ? { mask: batch.mask } : {}),
  });
  const normed = gatedRmsNorm(tape, F.reshape(tape, o, [T * Hv, Dv]), F.reshape(tape, z, [T * Hv, Dv]), m.param(`${att}.out_norm.weight`), cfg.rmsNormEps);
  return lin(F.reshape(tape, normed, [T, Hv * Dv]), 'out_proj');
}

/** The shared expert of MoE layer prefix `pre` (`decoder.layers.i`) on h [T, H]: sigmoid(h · g) · fc2(SwiGLU(fc1(h))). */
export function sharedExpert(m: BlockAccess, tape: Tape, h: Var, pre: string): Var {
  const act = F.swigluFused(tape, m.linear(tape, h, `${pre}.mlp.shared_experts.linear_fc1.weight`, 'column'));
  const out = m.linear(tape, act, `${pre}.mlp.shared_experts.linear_fc2.weight`, 'row');
  const gate = sigmoid(tape, m.linear(tape, h, `${pre}.mlp.shared_experts.gate_weight`, 'replicated'));
  return scaleRows(tape, gate, out);
}
