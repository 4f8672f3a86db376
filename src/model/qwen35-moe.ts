/**
 * Qwen3.5-MoE's sparse block on the tape, as Transformers' Qwen3_5MoeSparseMoeBlock: the routed
 * experts of Qwen3-MoE (softmax router `mlp.gate`, top-k renormalised, grouped SwiGLU experts,
 * F.moe) plus a shared expert every token goes through, a SwiGLU MLP scaled per token by
 * sigmoid(shared_expert_gate · x):
 *   y = Σ_topk w_e · expert_e(x) + sigmoid(x · g) · down(silu(gate(x)) * up(x)).
 */
import { fill, Tensor } from '../runtime/device/device-index.js';
import { Var, type Tape } from './autograd.js';
import type { ModelConfig } from './config.js';
import * as F from './functional.js';
import { fusedExpertNames } from './params.js';
import { mul, sigmoid } from './qwen35-ops.js';

export interface SparseBlockAccess {
  /** Parameter by HF name. */
  p(name: string): Var;
  /** x · W(name)ᵀ through the projection hooks (LoRA). */
  linear(x: Var, name: string): Var;
  /** Replacements for the grouped expert projections (LoRA on fused experts). */
  moeAdapters?: Partial<F.MoeAdapters>;
}

/** s [T, 1] times every column of x [T, H]: s is spread over H columns by a product with a ones row. */
export function scaleRows(tape: Tape, s: Var, x: Var): Var {
  const H = x.shape[1]!;
  const ones = tape.own(Tensor.empty(s.value.device, [H, 1], s.value.dtype));
  fill(ones, 1, { stream: tape.stream });
  return mul(tape, F.linear(tape, s, new Var(ones)), x);
}

/** The sparse block of decoder layer `layer` on h [T, H] (the post-attention norm's output). */
export function sparseMoeBlock(tape: Tape, cfg: ModelConfig, layer: number, h: Var, a: SparseBlockAccess): Var {
  const pre = `model.layers.${layer}.mlp`;
  const experts = fusedExpertNames(layer);
  const weights = { router: a.p(`${pre}.gate.weight`), gateUp: a.p(experts.gateUp), down: a.p(experts.down) };
  const routed = F.moe(tape, h, weights, cfg.moe!.topK, cfg.moe!.normTopkProb, a.moeAdapters);
  const act = F.swiglu(tape, a.linear(h, `${pre}.shared_expert.gate_proj.weight`), a.linear(h, `${pre}.shared_expert.up_proj.weight`));
  const shared = a.linear(act, `${pre}.shared_expert.down_proj.weight`);
  const gate = sigmoid(tape, a.linear(h, `${pre}.shared_expert_gate.weight`));
  return F.add(tape, routed, scaleRows(tape, gate, shared));
}
