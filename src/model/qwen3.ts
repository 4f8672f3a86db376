/**
 * Qwen3-style decoder (dense `qwen3` and sparse `qwen3_moe`), forward on a tape:
 * embedding → per layer [RMSNorm → attention (q/k/v projections, per-head q/k
 * RMSNorm, RoPE, causal GQA, o projection) + residual → RMSNorm → SwiGLU MLP or
 * MoE block + residual] → final RMSNorm → LM head (tied to the embedding when
 * the config says so). Parameters carry HF names (see params.ts).
 */
import { Tensor, type Device, type Stream } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import type { Var, Tape } from './autograd.js';
import { isMoeLayer, type ModelConfig } from './config.js';
import * as F from './functional.js';
import type { ParamStore } from './param-store.js';
import { fusedExpertNames } from './params.js';
import { ropeTable } from './rope-scaling.js';

export interface Batch {
  /** int32 [B·S] token ids, row-major. */
  ids: Tensor;
  /** int32 [B·S] positions (0..S-1 per row; with a padding mask, each row's tokens count from 0). */
  positions: Tensor;
  batch: number;
  seqLen: number;
  /**
   * int32 [B, S] padding mask (1 = token, 0 = pad) when rows are padded: the 2-D mask, never a
   * processed 4-D attention mask. Qwen3.5's Gated DeltaNet layers need it for left padding
   * (causal layers are exact under right padding without it).
   */
  mask?: Tensor;
  /** Some row has a pad before one of its tokens (left padding); uploadBatch sets it with the mask. */
  leftPadded?: boolean;
  /** max(positions) + 1, known on the host (uploadBatch sets it); dynamic rope's sequence length. */
  positionsEnd?: number;
}

/** The sequence length dynamic rope sees for a batch: max position + 1 (seqLen bounds it when unknown). */
export const ropeSeqLen = (batch: Batch): number => batch.positionsEnd ?? batch.seqLen;

/**
 * Uploads token ids (and their positions) of a [B, S] batch, and its 2-D padding mask [B·S]
 * (1 = token, 0 = pad) when given: positions then count each row's tokens from 0, as HF's
 * position_ids = cumsum(attention_mask) - 1 do (pads get 0). The caller owns the tensors.
 */
export function uploadBatch(ids: Int32Array, batch: number, seqLen: number, device: Device, stream: Stream, mask?: Int32Array): Batch {
  const positions = new Int32Array(batch * seqLen);
  let leftPadded = false;
  if (mask !== undefined) {
    if (mask.length !== batch * seqLen || mask.some((m) => m !== 0 && m !== 1)) {
      throw new InvalidArgumentError(
        `uploadBatch(): the padding mask must be ${batch}×${seqLen} = ${batch * seqLen} values of 0 (pad) or 1 (token), row-major, but it has ${mask.length} values${mask.length === batch * seqLen ? ' and one is neither 0 nor 1' : ''}. HINT: pass the 2-D attention_mask of the rows, flattened.`,
        { argument: 'mask' },
      );
    }
    for (let b = 0; b < batch; b++) {
      let seen = 0;
      for (let s = 0; s < seqLen; s++) {
        const i = b * seqLen + s;
        if (mask[i]) positions[i] = seen++;
        else if (s < seqLen - 1 && mask[i + 1]) leftPadded = true; // a pad followed by a token
      }
    }
  } else for (let b = 0; b < batch; b++) for (let s = 0; s < seqLen; s++) positions[b * seqLen + s] = s;
  const out: Batch = {
    ids: Tensor.fromArray(device, ids, [batch * seqLen], { stream }),
    positions: Tensor.fromArray(device, positions, [batch * seqLen], { stream }),
    batch,
    seqLen,
    positionsEnd: positions.reduce((m, p) => Math.max(m, p + 1), 0),
  };
  if (mask !== undefined) {
    out.mask = Tensor.fromArray(device, mask, [batch, seqLen], { stream });
    out.leftPadded = leftPadded;
  }
  return out;
}

/**
 * Refuses a padded batch that is (or may be) left-padded, for a forward whose attention has no key
 * mask (every attention in this build): its tokens would attend to the pads. Right padding is exact
 * without a mask, since causal attention never lets a token see a later pad.
 */
export function refuseLeftPadding(batch: Batch, who: string): void {
  if (!batch.mask || batch.leftPadded === false) return;
  throw new InvalidArgumentError(
    `${who}: ${batch.leftPadded ? 'the batch is left-padded' : 'the batch has a padding mask but does not say whether it is left-padded'}, and attention has no key mask in this build, so its tokens would attend to the pads. HINT: right-pad the rows (causal attention then needs no mask), or build the batch with uploadBatch(..., mask), which records leftPadded.`,
    { argument: 'batch.mask' },
  );
}

/**
 * Where the forward gets its parameters. A ParamStore hands out its leaf Vars; a
 * sharded strategy (FSDP2) returns all-gathered Vars recorded on the tape (their
 * backward reduce-scatters) and uses the layer hooks to gather ahead and free after.
 */
export interface ParamSource {
  /** Parameter `name` (HF name, fused experts) for this forward. */
  param(tape: Tape, name: string): Var;
  /** Before the parameters of `block` are first used. */
  blockStart?(tape: Tape, block: ModelBlock): void;
  /** After `block`'s forward; may return a replacement for its output (e.g. a node whose backward re-gathers). */
  blockEnd?(tape: Tape, block: ModelBlock, output: Var): Var;
}

/** The forward's blocks, in order: the embedding, each decoder layer, the final norm + LM head. */
export type ModelBlock = { kind: 'embed' } | { kind: 'layer'; index: number } | { kind: 'head' };

/**
 * Optional replacements for the projections (LoRA adapters): `linear` for every
 * dense projection by its HF weight name, `experts` for a fused-expert weight
 * (`gate_up_proj` / `down_proj`) inside the MoE block. Return undefined to use the plain op.
 */
export interface ProjectionHooks {
  linear?(tape: Tape, x: Var, weight: Var, name: string): Var | undefined;
  moeWeights?(tape: Tape, layer: number): Partial<F.MoeAdapters> | undefined;
}

export class Qwen3Model {
  readonly source: ParamSource;

  constructor(
    readonly cfg: ModelConfig,
    params: ParamStore | ParamSource,
    readonly hooks: ProjectionHooks = {},
  ) {
    F.registerModelPatches();
    this.source = 'param' in params ? params : { param: (_tape, name) => (params as ParamStore).get(name) };
  }

  private tape!: Tape;

  private p(name: string): Var {
    return this.source.param(this.tape, name);
  }

  /** x · W(name)ᵀ, through the projection hook when one is set. */
  private linear(tape: Tape, x: Var, name: string): Var {
    const w = this.p(name);
    return this.hooks.linear?.(tape, x, w, name) ?? F.linear(tape, x, w);
  }

  private start(tape: Tape, block: ModelBlock): void {
    this.source.blockStart?.(tape, block);
  }

  private end(tape: Tape, block: ModelBlock, out: Var): Var {
    return this.source.blockEnd?.(tape, block, out) ?? out;
  }

  /** Logits [B·S, V] of a batch. */
  forward(tape: Tape, batch: Batch): Var {
    const { cfg } = this;
    const { batch: B, seqLen: S } = batch;
    const T = B * S;
    const D = cfg.headDim;
    refuseLeftPadding(batch, `${cfg.modelType} forward`);
    // Stateless per forward: dynamic rope scales from this batch's length (rope-scaling.ts).
    const table = ropeTable(cfg, D, ropeSeqLen(batch));
    this.tape = tape;
    this.start(tape, { kind: 'embed' });
    let x = this.end(tape, { kind: 'embed' }, F.embedding(tape, batch.ids, this.p('model.embed_tokens.weight')));
    for (let i = 0; i < cfg.numLayers; i++) {
      const pre = `model.layers.${i}`;
      this.start(tape, { kind: 'layer', index: i });
      // Attention block.
      const h = F.rmsNorm(tape, x, this.p(`${pre}.input_layernorm.weight`), cfg.rmsNormEps);
      const headNormRope = (proj: Var, heads: number, norm: string): Var => {
        const perHead = F.reshape(tape, proj, [T * heads, D]);
        const normed = F.rmsNorm(tape, perHead, this.p(`${pre}.self_attn.${norm}.weight`), cfg.rmsNormEps);
        return F.rope(tape, F.reshape(tape, normed, [T, heads, D]), batch.positions, table);
      };
      const q = headNormRope(this.linear(tape, h, `${pre}.self_attn.q_proj.weight`), cfg.numHeads, 'q_norm');
      const k = headNormRope(this.linear(tape, h, `${pre}.self_attn.k_proj.weight`), cfg.numKvHeads, 'k_norm');
      const v = this.linear(tape, h, `${pre}.self_attn.v_proj.weight`);
      const o = F.attention(
        tape,
        F.reshape(tape, q, [B, S, cfg.numHeads, D]),
        F.reshape(tape, k, [B, S, cfg.numKvHeads, D]),
        F.reshape(tape, v, [B, S, cfg.numKvHeads, D]),
      );
      const attnOut = this.linear(tape, F.reshape(tape, o, [T, cfg.numHeads * D]), `${pre}.self_attn.o_proj.weight`);
      x = F.add(tape, x, attnOut);
      // MLP block.
      const h2 = F.rmsNorm(tape, x, this.p(`${pre}.post_attention_layernorm.weight`), cfg.rmsNormEps);
      let mlpOut: Var;
      if (cfg.moe && isMoeLayer(cfg, i)) {
        const names = fusedExpertNames(i);
        const weights = { router: this.p(`${pre}.mlp.gate.weight`), gateUp: this.p(names.gateUp), down: this.p(names.down) };
        mlpOut = F.moe(tape, h2, weights, cfg.moe.topK, cfg.moe.normTopkProb, this.hooks.moeWeights?.(tape, i));
      } else {
        const gate = this.linear(tape, h2, `${pre}.mlp.gate_proj.weight`);
        const up = this.linear(tape, h2, `${pre}.mlp.up_proj.weight`);
        mlpOut = this.linear(tape, F.swiglu(tape, gate, up), `${pre}.mlp.down_proj.weight`);
      }
      x = this.end(tape, { kind: 'layer', index: i }, F.add(tape, x, mlpOut));
    }
    this.start(tape, { kind: 'head' });
    const hf = F.rmsNorm(tape, x, this.p('model.norm.weight'), cfg.rmsNormEps);
    const head = cfg.tieWordEmbeddings ? this.p('model.embed_tokens.weight') : this.p('lm_head.weight');
    return this.end(tape, { kind: 'head' }, F.linear(tape, hf, head));
  }
}
