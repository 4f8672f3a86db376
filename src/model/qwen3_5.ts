/**
 * Qwen3.5 text decoder (`qwen3_5`, and `qwen3_5_moe`), forward on a tape, as Transformers'
 * Qwen3_5TextModel: embedding → per layer [zero-centred RMSNorm → token mixer + residual →
 * zero-centred RMSNorm → SwiGLU MLP (Qwen3.5-MoE: the sparse block of qwen35-moe.ts) + residual]
 * → zero-centred RMSNorm → LM head. The token mixer is, by layer_types,
 * - a Gated DeltaNet: in_proj_qkv → causal depthwise conv1d + SiLU → q, k, v; in_proj_a / in_proj_b
 *   → decay g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b); the chunked gated delta
 *   rule (q, k L2-normalised) → gated RMSNorm with z = in_proj_z → out_proj;
 * - gated full attention: q_proj gives per head the query and an output gate; q / k zero-centred
 *   RMSNorm, RoPE on the first rotaryDim channels, causal GQA, output * sigmoid(gate) → o_proj.
 * Positions are text-only (Qwen3.5's multimodal rope then equals plain partial RoPE).
 *
 * Padding: the GDN layers take the batch's 2-D [B, S] padding mask (never a processed 4-D
 * attention mask): padded tokens' q‖k‖v are zeroed before the conv, so they add nothing to a real
 * token's conv window, and the recurrence skips them (no decay, no update), so a left-padded row
 * gives its tokens the logits of the unpadded sequence. Full attention has no key mask in this
 * build, so a left-padded batch is refused when the model has a full-attention layer.
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import type { Var, Tape } from './autograd.js';
import type { ModelConfig } from './config.js';
import * as F from './functional.js';
import { causalConv1d, gatedDeltaRule, gatedRmsNorm, gdnGating } from './gdn-functional.js';
import { refuseLeftPadding, ropeSeqLen, type Batch, type ModelBlock, type ParamSource, type ProjectionHooks } from './qwen3.js';
import type { ParamStore } from './param-store.js';
import { centredRmsNorm, mul, partialRope, sigmoid, splitLast, zeroPadRows } from './qwen35-ops.js';
import { gdnConvDim } from './params-qwen35.js';
import { sparseMoeBlock } from './qwen35-moe.js';
import { ropeTable } from './rope-scaling.js';

export class Qwen35Model {
  readonly source: ParamSource;
  private tape!: Tape;

  constructor(
    readonly cfg: ModelConfig,
    params: ParamStore | ParamSource,
    readonly hooks: ProjectionHooks = {},
  ) {
    F.registerModelPatches();
    this.source = 'param' in params ? params : { param: (_tape, name) => (params as ParamStore).get(name) };
  }

  private p(name: string): Var {
    return this.source.param(this.tape, name);
  }

  /** x · W(name)ᵀ, through the projection hook when one is set. */
  private linear(x: Var, name: string): Var {
    const w = this.p(name);
    return this.hooks.linear?.(this.tape, x, w, name) ?? F.linear(this.tape, x, w);
  }

  private norm(x: Var, name: string): Var {
    return centredRmsNorm(this.tape, x, this.p(name), this.cfg.rmsNormEps);
  }

  private block(block: ModelBlock, run: () => Var): Var {
    this.source.blockStart?.(this.tape, block);
    const out = run();
    return this.source.blockEnd?.(this.tape, block, out) ?? out;
  }

  /** Logits [B·S, V] of a batch. */
  forward(tape: Tape, batch: Batch): Var {
    const { cfg } = this;
    this.checkMask(batch);
    this.tape = tape;
    let x = this.block({ kind: 'embed' }, () => F.embedding(tape, batch.ids, this.p('model.embed_tokens.weight')));
    for (let i = 0; i < cfg.numLayers; i++) {
      const pre = `model.layers.${i}`;
      const res = x;
      x = this.block({ kind: 'layer', index: i }, () => {
        const h = this.norm(res, `${pre}.input_layernorm.weight`);
        const mixed =
          cfg.qwen35!.layerTypes[i] === 'linear_attention' ? this.gatedDeltaNet(h, `${pre}.linear_attn`, batch) : this.attention(h, `${pre}.self_attn`, batch);
        const y = F.add(tape, res, mixed);
        const h2 = this.norm(y, `${pre}.post_attention_layernorm.weight`);
        return F.add(tape, y, this.mlp(h2, i));
      });
    }
    return this.block({ kind: 'head' }, () => {
      const hf = this.norm(x, 'model.norm.weight');
      const head = cfg.tieWordEmbeddings ? this.p('model.embed_tokens.weight') : this.p('lm_head.weight');
      return F.linear(tape, hf, head);
    });
  }

  /** The padding mask must be the 2-D [B, S] int32 one; left padding needs every layer to mask (GDN does, attention cannot). */
  private checkMask(batch: Batch): void {
    const m = batch.mask;
    if (m === undefined) return;
    const { batch: B, seqLen: S } = batch;
    if (m.shape.length !== 2 || m.shape[0] !== B || m.shape[1] !== S || m.dtype !== 'int32') {
      throw new InvalidArgumentError(
        `${this.cfg.modelType} forward: batch.mask must be the 2-D [${B}, ${S}] int32 padding mask (1 = token, 0 = pad) but is ${m.dtype} [${m.shape.join(', ')}]; a processed 4-D attention mask must never reach the Gated DeltaNet layers. HINT: pass the raw attention_mask of the rows (uploadBatch's mask), not the causal mask built for attention.`,
        { argument: 'batch.mask', shape: [...m.shape] },
      );
    }
    if (this.cfg.qwen35!.layerTypes.includes('full_attention')) refuseLeftPadding(batch, `${this.cfg.modelType} forward (full attention)`);
  }

  /** The dense SwiGLU MLP, or Qwen3.5-MoE's sparse block, of layer `i`. */
  private mlp(h: Var, i: number): Var {
    const { tape } = this;
    if (this.cfg.moe) {
      const moeAdapters = this.hooks.moeWeights?.(tape, i);
      const access = { p: (name: string) => this.p(name), linear: (x: Var, name: string) => this.linear(x, name) };
      return sparseMoeBlock(tape, this.cfg, i, h, moeAdapters ? { ...access, moeAdapters } : access);
    }
    const pre = `model.layers.${i}.mlp`;
    const gate = this.linear(h, `${pre}.gate_proj.weight`);
    const up = this.linear(h, `${pre}.up_proj.weight`);
    return this.linear(F.swiglu(tape, gate, up), `${pre}.down_proj.weight`);
  }

  private attention(h: Var, pre: string, batch: Batch): Var {
    const { cfg, tape } = this;
    const { batch: B, seqLen: S } = batch;
    const T = B * S,
      D = cfg.headDim,
      nH = cfg.numHeads,
      nKV = cfg.numKvHeads;
    const rot = cfg.qwen35!.rotaryDim;
    const table = ropeTable(cfg, rot, ropeSeqLen(batch)); // over the rotary dim only
    // q_proj rows are per head [query (D) ‖ gate (D)].
    const qg = F.reshape(tape, this.linear(h, `${pre}.q_proj.weight`), [T * nH, 2 * D]);
    const [q0, gate] = splitLast(tape, qg, [D, D]) as [Var, Var];
    const headNormRope = (x: Var, heads: number, norm: string): Var => {
      const normed = this.norm(F.reshape(tape, x, [T * heads, D]), `${pre}.${norm}.weight`);
      return partialRope(tape, F.reshape(tape, normed, [T, heads, D]), batch.positions, table, rot);
    };
    const q = headNormRope(q0, nH, 'q_norm');
    const k = headNormRope(this.linear(h, `${pre}.k_proj.weight`), nKV, 'k_norm');
    const v = this.linear(h, `${pre}.v_proj.weight`);
    const o = F.attention(tape, F.reshape(tape, q, [B, S, nH, D]), F.reshape(tape, k, [B, S, nKV, D]), F.reshape(tape, v, [B, S, nKV, D]));
    const gated = mul(tape, F.reshape(tape, o, [T * nH, D]), sigmoid(tape, gate));
    return this.linear(F.reshape(tape, gated, [T, nH * D]), `${pre}.o_proj.weight`);
  }

  private gatedDeltaNet(h: Var, pre: string, batch: Batch): Var {
    const { cfg, tape } = this;
    const { batch: B, seqLen: S } = batch;
    const T = B * S;
    const { numKeyHeads: Hk, numValueHeads: Hv, keyHeadDim: Dk, valueHeadDim: Dv } = cfg.qwen35!.linear;
    const C = gdnConvDim(cfg);
    let qkvRows = this.linear(h, `${pre}.in_proj_qkv.weight`);
    if (batch.mask) qkvRows = zeroPadRows(tape, qkvRows, batch.mask);
    const qkv = F.reshape(tape, qkvRows, [B, S, C]);
    // The HF weight [C, 1, K] as it is: the op views it as [C, K] when it runs (see causalConv1d).
    const conv = causalConv1d(tape, qkv, this.p(`${pre}.conv1d.weight`));
    const [q, k, v] = splitLast(tape, F.reshape(tape, conv, [T, C]), [Hk * Dk, Hk * Dk, Hv * Dv]) as [Var, Var, Var];
    const z = this.linear(h, `${pre}.in_proj_z.weight`);
    const b = F.reshape(tape, this.linear(h, `${pre}.in_proj_b.weight`), [B, S, Hv]);
    const a = F.reshape(tape, this.linear(h, `${pre}.in_proj_a.weight`), [B, S, Hv]);
    const { g, beta } = gdnGating(tape, a, b, this.p(`${pre}.A_log`), this.p(`${pre}.dt_bias`));
    const o = gatedDeltaRule(tape, F.reshape(tape, q, [B, S, Hk, Dk]), F.reshape(tape, k, [B, S, Hk, Dk]), F.reshape(tape, v, [B, S, Hv, Dv]), g, beta, {
      useQkL2norm: true,
      ...(batch.mask ? { mask: batch.mask } : {}),
    });
    const normed = gatedRmsNorm(tape, F.reshape(tape, o, [T * Hv, Dv]), F.reshape(tape, z, [T * Hv, Dv]), this.p(`${pre}.norm.weight`), cfg.rmsNormEps);
    return this.linear(F.reshape(tape, normed, [T, Hv * Dv]), `${pre}.out_proj.weight`);
  }
}
