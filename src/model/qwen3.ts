/**
 * Qwen3-style decoder (dense `qwen3` and sparse `qwen3_moe`), forward on a tape:
 * embedding → per layer [RMSNorm → attention (q/k/v projections, per-head q/k
 * RMSNorm, RoPE, causal GQA, o projection) + residual → RMSNorm → SwiGLU MLP or
 * MoE block + residual] → final RMSNorm → LM head (tied to the embedding when
 * the config says so). Parameters carry HF names (see params.ts).
 */
import { Tensor, type Device, type Stream } from '../runtime/device-index.js';
import type { Var, Tape } from './autograd.js';
import { isMoeLayer, type ModelConfig } from './config.js';
import * as F from './functional.js';
import type { ParamStore } from './param-store.js';
import { fusedExpertNames } from './params.js';

export interface Batch {
  /** int32 [B·S] token ids, row-major. */
  ids: Tensor;
  /** int32 [B·S] positions (0..S-1 per row). */
  positions: Tensor;
  batch: number;
  seqLen: number;
}

/** Uploads token ids (and their positions) of a [B, S] batch. */
export function uploadBatch(ids: Int32Array, batch: number, seqLen: number, device: Device, stream: Stream): Batch {
  const positions = new Int32Array(batch * seqLen);
  for (let b = 0; b < batch; b++) for (let s = 0; s < seqLen; s++) positions[b * seqLen + s] = s;
  return {
    ids: Tensor.fromArray(device, ids, [batch * seqLen], { stream }),
    positions: Tensor.fromArray(device, positions, [batch * seqLen], { stream }),
    batch,
    seqLen,
  };
}

export class Qwen3Model {
  constructor(
    readonly cfg: ModelConfig,
    readonly params: ParamStore,
  ) {
    F.registerModelPatches();
  }

  private p(name: string): Var {
    return this.params.get(name);
  }

  /** Logits [B·S, V] of a batch. */
  forward(tape: Tape, batch: Batch): Var {
    const { cfg } = this;
    const { batch: B, seqLen: S } = batch;
    const T = B * S;
    const D = cfg.headDim;
    let x = F.embedding(tape, batch.ids, this.p('model.embed_tokens.weight'));
    for (let i = 0; i < cfg.numLayers; i++) {
      const pre = `model.layers.${i}`;
      // Attention block.
      const h = F.rmsNorm(tape, x, this.p(`${pre}.input_layernorm.weight`), cfg.rmsNormEps);
      const headNormRope = (proj: Var, heads: number, norm: string): Var => {
        const perHead = F.reshape(tape, proj, [T * heads, D]);
        const normed = F.rmsNorm(tape, perHead, this.p(`${pre}.self_attn.${norm}.weight`), cfg.rmsNormEps);
        return F.rope(tape, F.reshape(tape, normed, [T, heads, D]), batch.positions, cfg.rope.theta);
      };
      const q = headNormRope(F.linear(tape, h, this.p(`${pre}.self_attn.q_proj.weight`)), cfg.numHeads, 'q_norm');
      const k = headNormRope(F.linear(tape, h, this.p(`${pre}.self_attn.k_proj.weight`)), cfg.numKvHeads, 'k_norm');
      const v = F.linear(tape, h, this.p(`${pre}.self_attn.v_proj.weight`));
      const o = F.attention(
        tape,
        F.reshape(tape, q, [B, S, cfg.numHeads, D]),
        F.reshape(tape, k, [B, S, cfg.numKvHeads, D]),
        F.reshape(tape, v, [B, S, cfg.numKvHeads, D]),
      );
      const attnOut = F.linear(tape, F.reshape(tape, o, [T, cfg.numHeads * D]), this.p(`${pre}.self_attn.o_proj.weight`));
      x = F.add(tape, x, attnOut);
      // MLP block.
      const h2 = F.rmsNorm(tape, x, this.p(`${pre}.post_attention_layernorm.weight`), cfg.rmsNormEps);
      let mlpOut: Var;
      if (cfg.moe && isMoeLayer(cfg, i)) {
        const names = fusedExpertNames(i);
        mlpOut = F.moe(tape, h2, { router: this.p(`${pre}.mlp.gate.weight`), gateUp: this.p(names.gateUp), down: this.p(names.down) }, cfg.moe.topK, cfg.moe.normTopkProb);
      } else {
        const gate = F.linear(tape, h2, this.p(`${pre}.mlp.gate_proj.weight`));
        const up = F.linear(tape, h2, this.p(`${pre}.mlp.up_proj.weight`));
        mlpOut = F.linear(tape, F.swiglu(tape, gate, up), this.p(`${pre}.mlp.down_proj.weight`));
      }
      x = F.add(tape, x, mlpOut);
    }
    const hf = F.rmsNorm(tape, x, this.p('model.norm.weight'), cfg.rmsNormEps);
    const head = cfg.tieWordEmbeddings ? this.p('model.embed_tokens.weight') : this.p('lm_head.weight');
    return F.linear(tape, hf, head);
  }
}
