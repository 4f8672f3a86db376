/**
 * The Qwen3 / Qwen3-MoE / Qwen3.5 / Qwen3.5-MoE decoder forward over Megatron-named,
 * tensor-parallel local parameters (the same math as src/model/qwen3.ts and qwen3_5.ts,
 * sharded). Qwen3's layer:
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
 * Qwen3.5 (qwen35-blocks.ts): zero-centred norms (1 + w); Gated DeltaNet layers whole on every
 * TP rank (replicated, no TP / CP split of GDN); gated attention split per head with its gate
 * (linear_qkv column parallel as above) and partial RoPE; the MoE block adds the shared expert
 * (column / row parallel, its sigmoid gate replicated).
 */
import type { Communicator } from '../../runtime/comm/comm.js';
import type { Tape, Var } from '../../model/autograd.js';
import { isMoeLayer, isQwen35, type ModelConfig } from '../../model/config.js';
import * as F from '../../model/functional.js';
import { refuseLeftPadding, ropeSeqLen, type Batch } from '../../model/qwen3.js';
import { ropeTable } from '../../model/rope-scaling.js';
import { centredRmsNorm, mul, partialRope, sigmoid, splitLast } from '../../model/qwen35-ops.js';
import { copyToTp, reduceFromTp, type PendingComms } from './comm-ops.js';
import { expertParallelMoe } from './expert-parallel.js';
import { splitQkv } from './qkv.js';
import type { ParallelMode } from './parallel-mode.js';
import { gatedDeltaNet, sharedExpert } from './qwen35-blocks.js';
import { qkvQueryHeads } from './specs.js';

export type { ParallelMode };

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

  /** A local parameter by Megatron name. */
  param(name: string): Var {
    return this.params.param(name);
  }

  /**
   * Column parallel: copyToTp(x) · W_localᵀ (output sharded on features). Row parallel: x_local ·
   * W_localᵀ, summed over tp. Replicated: x · Wᵀ, no communication.
   */
  linear(tape: Tape, x: Var, name: string, mode: ParallelMode): Var {
    const { tp, pending } = this.groups;
    const w = this.params.param(name);
    const input = mode === 'column' ? copyToTp(tape, x, tp, pending) : x;
    const y = this.linearHook?.(tape, input, w, name, mode) ?? F.linear(tape, input, w);
    return mode === 'row' ? reduceFromTp(tape, y, tp, pending) : y;
  }

  /** RMSNorm by the local weight `name`. */
  private norm(tape: Tape, x: Var, name: string): Var {
    return this.normBy(tape, x, this.params.param(name));
  }

  /** RMSNorm scaled by `w`; Qwen3.5 stores its norm weights centred on zero (scale 1 + w). */
  private normBy(tape: Tape, x: Var, w: Var): Var {
    return isQwen35(this.cfg) ? centredRmsNorm(tape, x, w, this.cfg.rmsNormEps) : F.rmsNorm(tape, x, w, this.cfg.rmsNormEps);
  }

  /** Logits [B·S, V] (full vocabulary on every rank). Async: an expert-parallel MoE layer reads its token counts on the host. */
  async forward(tape: Tape, batch: Batch): Promise<Var> {
    const { cfg } = this;
    refuseLeftPadding(batch, 'megatron forward');
    const p = (n: string) => this.params.param(n);
    const gdnLayer = (i: number) => cfg.qwen35?.layerTypes[i] === 'linear_attention';
    let x = F.embedding(tape, batch.ids, p('embedding.word_embeddings.weight'));
    for (let i = 0; i < cfg.numLayers; i++) {
      const pre = `decoder.layers.${i}`;
      const att = `${pre}.self_attention`;
      const mixed = gdnLayer(i)
        ? gatedDeltaNet(this, cfg, tape, this.norm(tape, x, `${att}.in_proj_qkv.layer_norm_weight`), att, batch)
        : this.attention(tape, this.norm(tape, x, `${att}.linear_qkv.layer_norm_weight`), att, batch);
      x = F.add(tape, x, mixed);
      x = F.add(tape, x, await this.mlp(tape, x, i));
    }
    const hf = this.norm(tape, x, 'decoder.final_layernorm.weight');
    return F.linear(tape, hf, p(cfg.tieWordEmbeddings ? 'embedding.word_embeddings.weight' : 'output_layer.weight'));
  }

  /**
   * Attention on this rank's heads (nH/tp, nKV/tp). Qwen3.5's is gated: its linear_qkv holds per
   * head a query and a gate block (2·g blocks per KV group), the output is scaled by sigmoid(gate);
   * its RoPE covers the first rotaryDim channels of a head.
   */
  private attention(tape: Tape, h: Var, att: string, batch: Batch): Var {
    const { cfg, groups } = this;
    const { batch: B, seqLen: S } = batch;
    const T = B * S;
    const D = cfg.headDim;
    const nH = cfg.numHeads / groups.tp.size;
    const nKV = cfg.numKvHeads / groups.tp.size;
    const gated = isQwen35(cfg);
    const qBlocks = (qkvQueryHeads(cfg) / cfg.numKvHeads) * nKV;
    const qkv = splitQkv(tape, this.linear(tape, h, `${att}.linear_qkv.weight`, 'column'), nKV, qBlocks / nKV, D);
    let q0 = qkv.q;
    let gate: Var | undefined;
    if (gated) [q0, gate] = splitLast(tape, F.reshape(tape, qkv.q, [T * nH, 2 * D]), [D, D]) as [Var, Var];
    const rotary = cfg.qwen35?.rotaryDim ?? D;
    const table = ropeTable(cfg, rotary, ropeSeqLen(batch));
    const normRope = (proj: Var, heads: number, norm: string): Var => {
      // Shared by all heads, seen through this rank's heads only: its gradient is summed over tp.
      const w = copyToTp(tape, this.params.param(`${att}.${norm}.weight`), groups.tp, groups.pending);
      const normed = this.normBy(tape, F.reshape(tape, proj, [T * heads, D]), w);
      return partialRope(tape, F.reshape(tape, normed, [T, heads, D]), batch.positions, table, rotary);
    };
    const q = normRope(q0, nH, 'q_layernorm');
    const k = normRope(qkv.k, nKV, 'k_layernorm');
    let o = F.attention(tape, F.reshape(tape, q, [B, S, nH, D]), F.reshape(tape, k, [B, S, nKV, D]), F.reshape(tape, qkv.v, [B, S, nKV, D]));
    if (gate) o = mul(tape, F.reshape(tape, o, [T * nH, D]), sigmoid(tape, gate));
    return this.linear(tape, F.reshape(tape, o, [T, nH * D]), `${att}.linear_proj.weight`, 'row');
  }

  /** The dense MLP (column → SwiGLU → row) or the MoE block (+ Qwen3.5-MoE's shared expert) of layer `i` on the residual x. */
  private async mlp(tape: Tape, x: Var, i: number): Promise<Var> {
    const { cfg, groups } = this;
    const pre = `decoder.layers.${i}`;
    if (!(cfg.moe && isMoeLayer(cfg, i))) {
      const h2 = this.norm(tape, x, `${pre}.mlp.linear_fc1.layer_norm_weight`);
      const act = F.swigluFused(tape, this.linear(tape, h2, `${pre}.mlp.linear_fc1.weight`, 'column'));
      return this.linear(tape, act, `${pre}.mlp.linear_fc2.weight`, 'row');
    }
    const h2 = this.norm(tape, x, `${pre}.pre_mlp_layernorm.weight`);
    const router = this.params.param(`${pre}.mlp.router.weight`);
    const ex = this.params.experts(i);
    const adapters = this.expertsHook?.(tape, i);
    const routed =
      groups.ep.size === 1
        ? F.moe(tape, h2, { router, gateUp: ex.fc1, down: ex.fc2 }, cfg.moe.topK, cfg.moe.normTopkProb, adapters)
        : await expertParallelMoe(tape, h2, { router, ...ex }, cfg.moe.topK, cfg.moe.normTopkProb, groups.ep, groups.pending, adapters);
    return cfg.moe.sharedExpertIntermediateSize ? F.add(tape, routed, sharedExpert(this, tape, h2, pre)) : routed;
  }
}
