/**
 * The rollout engine's forward on one TP rank (inference only, no tape), reading the
 * packed runtime parameters in their processed layout:
 *   embedding → per layer [RMSNorm → q/k/v from one matmul on qkv_proj → per-head q/k
 *   RMSNorm, RoPE and the KV cache write (one fused op, K.qkvNormRope) → causal attention
 *   (prefill, K.attention) or KV-cache attention (decode, K.attentionDecode) → o_proj (row parallel) → all-reduce over tp → residual
 *   → RMSNorm → gate_up_proj → SwiGLU → down_proj (row parallel), or the MoE block on
 *   w13 / w2 in the grouped-matmul layout → all-reduce → residual] → final RMSNorm → LM head.
 * The math is Qwen3Model's (src/model/qwen3.ts) restricted to the rank's heads and
 * intermediate columns; the all-reduces add the partial sums back.
 * A decode step at tp = 1 with fp32 weights runs each dense layer as one op (K.decodeLayer: the nine
 * kernels below, in the same order, the same bits).
 * Each residual add is fused with the RMSNorm after it (K.addRmsNorm). At a tiny model's size an op
 * costs mostly its dispatch, so fewer ops per token is less CPU; the fused kernels give the separate
 * kernels' bits.
 * All-reduces are enqueued on the stream (ordered with the kernels around them); their
 * completion promises are collected in `pending` for the caller to await.
 */
import { Tensor, type Stream } from '../runtime/device/device-index.js';
import { add } from '../runtime/device/ops.js';
import type { Communicator } from '../runtime/comm/comm.js';
import { isMoeLayer, type ModelConfig } from '../model/config.js';
import * as K from '../model/kernels/index.js';
import { PATCHES } from '../model/functional.js';
import { patchImpl } from '../runtime/patches.js';
import { ropeTable } from '../model/rope-scaling.js';
import { forwardOps } from './forward-ops.js';
import type { KvCache } from './kv-cache.js';
import type { RuntimeParams } from './runtime-params.js';
import type { TpShard } from './tp-shard.js';

export interface ForwardContext {
  cfg: ModelConfig;
  params: RuntimeParams;
  shard: TpShard;
  /** The tp communicator (null for tp = 1). */
  comm: Communicator | null;
  stream: Stream;
}

export interface ForwardInput {
  /** int32 [B·S] token ids (rows right-padded to S). */
  ids: Tensor;
  /** int32 [B·S] positions. */
  positions: Tensor;
  batch: number;
  seqLen: number;
  /**
   * max(positions) + 1 of this step: dynamic rope's sequence length. Per step, so keys already in
   * the KV cache keep the table they were written with (as HF generate); the trainer instead uses
   * one table for the whole sequence (rope-scaling.ts).
   */
  ropeSeqLen: number;
  /** 'prefill' attends within the batch (causal); 'decode' (seqLen 1) attends to the KV cache. */
  mode: 'prefill' | 'decode';
  /**
   * KV cache to write this step's keys / values into (row b from position cachePos[b]: an int32
   * device tensor [B], so one kernel per layer writes every row); none for a pure scoring pass.
   */
  kv?: { cache: KvCache; cachePos: Tensor };
  /** decode: int32 [B] valid cache length per row after this step's write. */
  lengths?: Tensor;
  /** int32 [R]: the rows of [B·S] to compute logits for (default all). */
  outRows?: Tensor;
}

/** Logits [R, V] (R = outRows length, or B·S). Temporaries go to `scratch` (release after the step). */
export function forward(ctx: ForwardContext, inp: ForwardInput, scratch: Tensor[], pending: Promise<void>[]): Tensor {
  const { cfg, shard, stream } = ctx;
  const { batch: B, seqLen: S } = inp;
  const T = B * S,
    D = cfg.headDim,
    H = cfg.hiddenSize;
  const nH = shard.headsLocal,
    nKV = shard.kvHeadsLocal;
  const { own, o, w, linear, head: headOf, embed, norm, allReduce, routedExperts, attend } = forwardOps(ctx, scratch, pending);

  const table = ropeTable(cfg, D, inp.ropeSeqLen);
  let x = embed(inp.ids);
  // The residual add and the next RMSNorm are one op (K.addRmsNorm): x becomes the sum.
  const addNorm = (d: Tensor, weight: string): Tensor => {
    const r = K.addRmsNorm(x, d, w(weight), cfg.rmsNormEps, o(PATCHES.rmsNorm));
    x = own(r.sum);
    return own(r.y);
  };
  let h = norm(x, 'model.layers.0.input_layernorm.weight');
  const fused = fusedDecode(ctx, inp);
  for (let i = 0; i < cfg.numLayers; i++) {
    const pre = `model.layers.${i}`;
    const nextLn = i + 1 < cfg.numLayers ? `model.layers.${i + 1}.input_layernorm.weight` : 'model.norm.weight';
    if (fused && !isMoeLayer(cfg, i)) {
      // The nine ops below in one (K.decodeLayer: the same kernels in the same order, the same bits).
      const c = inp.kv!.cache.views(i, B);
      const nw = (n: string) => w(`${pre}.self_attn.${n}.weight`);
      const weights = {
        qkv: nw('qkv_proj'),
        qNorm: nw('q_norm'),
        kNorm: nw('k_norm'),
        o: nw('o_proj'),
        postLn: w(`${pre}.post_attention_layernorm.weight`),
        gateUp: w(`${pre}.mlp.gate_up_proj.weight`),
        down: w(`${pre}.mlp.down_proj.weight`),
        nextLn: w(nextLn),
      };
      const r = K.decodeLayer(x, h, weights, nH, nKV, cfg.rmsNormEps, inp.positions, inp.lengths!, table, { kCache: c.k, vCache: c.v }, { stream });
      x = own(r.x);
      h = own(r.h);
      continue;
    }
    // One matmul against the whole qkv_proj (each output element is the same FMA chain over H as
    // on a row view), then one op for the per-head q/k RMSNorm + RoPE, the v split and this step's
    // KV cache write.
    const qkv = linear(h, w(`${pre}.self_attn.qkv_proj.weight`));
    const nw = (n: string) => w(`${pre}.self_attn.${n}.weight`);
    const c = inp.kv ? inp.kv.cache.views(i, B) : null;
    const cache = c ? { kCache: c.k, vCache: c.v, positions: inp.kv!.cachePos } : undefined;
    const { q, k, v } = K.qkvNormRope(qkv, nH, nKV, nw('q_norm'), nw('k_norm'), cfg.rmsNormEps, inp.positions, table, {
      stream,
      impl: o(PATCHES.rmsNorm).impl,
      cache,
    });
    own(q);
    own(k);
    own(v);
    const attn = attend(inp, i, q, k, v, nH, nKV, true);
    const attnOut = linear(attn.reshape([T, nH * D]), w(`${pre}.self_attn.o_proj.weight`));
    allReduce(attnOut);
    const h2 = addNorm(attnOut, `${pre}.post_attention_layernorm.weight`);
    let mlpOut: Tensor;
    if (isMoeLayer(cfg, i)) mlpOut = routedExperts(h2, pre);
    else {
      const gu = linear(h2, w(`${pre}.mlp.gate_up_proj.weight`));
      const act = own(K.swigluFused(gu, o(PATCHES.swiglu)));
      mlpOut = linear(act, w(`${pre}.mlp.down_proj.weight`));
    }
    allReduce(mlpOut);
    if (i + 1 < cfg.numLayers || !inp.outRows) h = addNorm(mlpOut, nextLn);
    else x = own(add(x, mlpOut, { stream }));
  }
  // With outRows, the final norm runs on the gathered rows only (the same per-row result).
  const hf = inp.outRows ? norm(own(K.embedding(inp.outRows, x.reshape([T, H]), o(PATCHES.embedding))), 'model.norm.weight') : h;
  const lmHead = cfg.tieWordEmbeddings ? w('model.embed_tokens.weight') : w('lm_head.weight');
  return headOf(hf, lmHead);
}

/**
 * Whether a decode step's dense layers may run as K.decodeLayer: one token per row written to the
 * KV cache at its position, no tensor parallelism (no all-reduce between the kernels), fp32
 * weights, and every kernel the layer uses on its fast implementation (the fused op has no other).
 */
function fusedDecode(ctx: ForwardContext, inp: ForwardInput): boolean {
  const { params, shard } = ctx;
  return (
    inp.mode === 'decode' &&
    inp.seqLen === 1 &&
    inp.kv !== undefined &&
    inp.kv.cachePos === inp.positions &&
    inp.lengths !== undefined &&
    inp.outRows === undefined &&
    shard.tpSize === 1 &&
    params.get('model.layers.0.self_attn.qkv_proj.weight').view('processed').dtype === 'fp32' &&
    patchImpl(PATCHES.linear) === 'fast' &&
    patchImpl(PATCHES.rmsNorm) === 'fast' &&
    patchImpl(PATCHES.swiglu) === 'fast'
  );
}
