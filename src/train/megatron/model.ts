/**
 * The Qwen3 / Qwen3-MoE decoder forward over Megatron-named, tensor-parallel local
 * parameters (the same math as src/model/qwen3.ts, sharded):
 *   embedding (replicated) → per layer [RMSNorm → copyToTp → linear_qkv (column
 *   parallel, this rank's KV groups) → split q/k/v → q/k layernorm + RoPE → attention
 *   on the local heads (nH/tp, nKV/tp) → linear_proj (row parallel) → reduceFromTp
 *   + residual → RMSNorm → dense MLP (copyToTp → linear_fc1 gate‖up, column → SwiGLU
 *   → linear_fc2, row → reduceFromTp) or MoE (replicated router; experts local, or
 *   over the ep group with all-to-all dispatch) + residual] → final RMSNorm → output
 *   layer (replicated, full vocab; the embedding when tied).
 * q/k layernorm weights are shared by all heads but each TP rank only sees its own
 * heads, so their gradients are partial: they go through copyToTp (summed over tp).
 * Every dense projection goes through `linear()` (one place for a LoRA hook: column
 * parallel A replicated / B sharded on out, row parallel A sharded on in / B replicated),
 * the local experts' grouped matmuls through `expertsHook` (see lora-hook.ts).
 */
import type { Communicator } from '../../runtime/comm/comm.js';
import type { Tape, Var } from '../../model/autograd.js';
import { isMoeLayer, type ModelConfig } from '../../model/config.js';
import * as F from '../../model/functional.js';
import { refuseLeftPadding, type Batch } from '../../model/qwen3.js';
import { copyToTp, reduceFromTp, type PendingComms } from './comm-ops.js';
import { expertParallelMoe } from './expert-parallel.js';
import { splitQkv } from './qkv.js';

export type ParallelMode = 'column' | 'row';

export interface MegatronParams {
  /** A local (this rank's shard) parameter by Megatron name. */
  param(name: string): Var;
  /** This rank's experts of MoE layer `layer`, stacked: fc1 [El, 2I, H], fc2 [El, H, I]. */
  experts(layer: number): { fc1: Var; fc2: Var };
}

/** Replaces a parallel linear (LoRA); return undefined for the plain x · Wᵀ on the local shard. */
export type ParallelLinearHook = (tape: Tape, x: Var, weight: Var, name: string, mode: ParallelMode) => Var | undefined;
/** Replaces the grouped matmuls over this rank's local experts of MoE layer `layer` (LoRA on fused experts). */
export type ExpertsHook = (tape: Tape, layer: number) => Partial<F.MoeAdapters> | undefined;

export interface MegatronGroups {
  tp: Communicator;
  ep: Communicator;
  pending: PendingComms;
}

export class MegatronModel {
  constructor(
    readonly cfg: ModelConfig,
    readonly params: MegatronParams,
    readonly groups: MegatronGroups,
    readonly linearHook?: ParallelLinearHook,
    readonly expertsHook?: ExpertsHook,
  ) {
    F.registerModelPatches();
  }

  /** Column parallel: copyToTp(x) · W_localᵀ (output sharded on features). Row parallel: x_local · W_localᵀ, summed over tp. */
  linear(tape: Tape, x: Var, name: string, mode: ParallelMode): Var {
    const { tp, pending } = this.groups;
    const w = this.params.param(name);
    const input = mode === 'column' ? copyToTp(tape, x, tp, pending) : x;
    const y = this.linearHook?.(tape, input, w, name, mode) ?? F.linear(tape, input, w);
    return mode === 'row' ? reduceFromTp(tape, y, tp, pending) : y;
  }

  /** Logits [B·S, V] (full vocabulary on every rank). Async: an expert-parallel MoE layer reads its token counts on the host. */
  async forward(tape: Tape, batch: Batch): Promise<Var> {
    const { cfg, groups } = this;
    refuseLeftPadding(batch, 'megatron forward');
    const p = (n: string) => this.params.param(n);
    const { batch: B, seqLen: S } = batch;
    const T = B * S;
    const D = cfg.headDim;
    const tpSize = groups.tp.size;
    const nH = cfg.numHeads / tpSize;
    const nKV = cfg.numKvHeads / tpSize;
    let x = F.embedding(tape, batch.ids, p('embedding.word_embeddings.weight'));
    for (let i = 0; i < cfg.numLayers; i++) {
      const pre = `decoder.layers.${i}`;
      const att = `${pre}.self_attention`;
      const h = F.rmsNorm(tape, x, p(`${att}.linear_qkv.layer_norm_weight`), cfg.rmsNormEps);
      const qkv = splitQkv(tape, this.linear(tape, h, `${att}.linear_qkv.weight`, 'column'), nKV, nH / nKV, D);
      const normRope = (proj: Var, heads: number, norm: string): Var => {
        const w = copyToTp(tape, p(`${att}.${norm}.weight`), groups.tp, groups.pending);
        const normed = F.rmsNorm(tape, F.reshape(tape, proj, [T * heads, D]), w, cfg.rmsNormEps);
        return F.rope(tape, F.reshape(tape, normed, [T, heads, D]), batch.positions, cfg.rope.theta);
      };
      const q = normRope(qkv.q, nH, 'q_layernorm');
      const k = normRope(qkv.k, nKV, 'k_layernorm');
      const o = F.attention(tape, F.reshape(tape, q, [B, S, nH, D]), F.reshape(tape, k, [B, S, nKV, D]), F.reshape(tape, qkv.v, [B, S, nKV, D]));
      x = F.add(tape, x, this.linear(tape, F.reshape(tape, o, [T, nH * D]), `${att}.linear_proj.weight`, 'row'));
      let out: Var;
      if (cfg.moe && isMoeLayer(cfg, i)) {
        const h2 = F.rmsNorm(tape, x, p(`${pre}.pre_mlp_layernorm.weight`), cfg.rmsNormEps);
        const router = p(`${pre}.mlp.router.weight`);
        const ex = this.params.experts(i);
        const adapters = this.expertsHook?.(tape, i);
        out =
          groups.ep.size === 1
            ? F.moe(tape, h2, { router, gateUp: ex.fc1, down: ex.fc2 }, cfg.moe.topK, cfg.moe.normTopkProb, adapters)
            : await expertParallelMoe(tape, h2, { router, ...ex }, cfg.moe.topK, cfg.moe.normTopkProb, groups.ep, groups.pending, adapters);
      } else {
        const h2 = F.rmsNorm(tape, x, p(`${pre}.mlp.linear_fc1.layer_norm_weight`), cfg.rmsNormEps);
        const act = F.swigluFused(tape, this.linear(tape, h2, `${pre}.mlp.linear_fc1.weight`, 'column'));
        out = this.linear(tape, act, `${pre}.mlp.linear_fc2.weight`, 'row');
      }
      x = F.add(tape, x, out);
    }
    const hf = F.rmsNorm(tape, x, p('decoder.final_layernorm.weight'), cfg.rmsNormEps);
    return F.linear(tape, hf, p(cfg.tieWordEmbeddings ? 'embedding.word_embeddings.weight' : 'output_layer.weight'));
  }
}
