/**
 * The rollout engine's forward for Qwen3.5 (`qwen3_5`, `qwen3_5_moe`; inference only, no
 * tape) on one TP rank, reading the runtime parameters in their processed layout. Above
 * tp 1 each token mixer and MLP works on the rank's heads / columns (tp-shard.ts,
 * gdn-shard.ts) and its row-parallel output (o_proj, out_proj, down_proj, the experts'
 * w2 and the shared expert's down_proj) is summed over the group by an all-reduce. The math is
 * Qwen35Model's (src/model/qwen3_5.ts, qwen35-moe.ts, qwen35-ops.ts) with the same kernels:
 *   embedding → per layer [zero-centred RMSNorm → token mixer + residual → zero-centred
 *   RMSNorm → SwiGLU MLP (or routed experts + the sigmoid-gated shared expert) + residual]
 *   → zero-centred RMSNorm → LM head.
 * Token mixers:
 * - Gated DeltaNet: in_proj_qkv → causal conv1d + SiLU → q, k, v; gating from in_proj_a /
 *   in_proj_b; the gated delta rule (chunked at prefill, recurrent at decode) → gated
 *   RMSNorm with in_proj_z → out_proj. Its past is the state cache (gdn-state-cache.ts):
 *   prefill writes, per row, the conv state of the row's last K - 1 real inputs and the
 *   recurrent state after its last real token (the rule takes the 2-D padding mask of the
 *   row lengths, so right padding leaves the state as an unpadded row would); decode takes
 *   both in and writes both out.
 * - gated full attention: q_proj rows of qkv_proj give per head the query and its output
 *   gate; q / k centred RMSNorm, RoPE on the first rotaryDim channels, causal attention
 *   (prefill) or KV-cache attention (decode), output · sigmoid(gate) → o_proj. Only these
 *   layers have KV-cache layers (qwen35-layout.ts kvLayerIndex).
 */
import { Tensor } from '../runtime/device/device-index.js';
import { add, fill, mul } from '../runtime/device/ops.js';
import { stridedRead, viewOf } from '../runtime/device/views.js';
import { isMoeLayer } from '../model/config.js';
import * as K from '../model/kernels/index.js';
import { PATCHES } from '../model/functional.js';
import { ropeTable } from '../model/rope-scaling.js';
import type { ForwardContext, ForwardInput } from './forward.js';
import { forwardOps } from './forward-ops.js';
import type { GdnStateCache } from './gdn-state-cache.js';
import { isGdnLayer, kvLayerIndex } from './qwen35-layout.js';
import { gdnLocal } from './gdn-shard.js';

export interface Qwen35ForwardInput extends ForwardInput {
  /** prefill: each row's real length (right padding follows): the GDN padding mask and where each row's state is taken. */
  rowLens: readonly number[];
  /** GDN states to write (prefill) or read and advance (decode, required); none for a pure scoring pass. */
  gdn?: GdnStateCache;
}

/** Logits [R, V] (R = outRows length, or B·S). Temporaries go to `scratch` (release after the step). */
export function forwardQwen35(ctx: ForwardContext, inp: Qwen35ForwardInput, scratch: Tensor[], pending: Promise<void>[]): Tensor {
  const { cfg, stream } = ctx;
  const device = ctx.params.device;
  const { batch: B, seqLen: S } = inp;
  const T = B * S,
    H = cfg.hiddenSize;
  const ops = forwardOps(ctx, scratch, pending);
  const { own, o, w, linear, norm, allReduce } = ops;
  const gdnOpts = { stream, impl: K.gdnBackendImpl() };
  const empty = (shape: readonly number[]) => own(Tensor.empty(device, [...shape], 'fp32'));
  const filled = (shape: readonly number[], value: number) => {
    const t = empty(shape);
    fill(t, value, { stream });
    return t;
  };
  // Qwen3.5 norms scale by 1 + w (its weights are stored centred on zero), as centredRmsNorm does.
  const centred = (name: string) => {
    const p = w(name);
    return own(add(p, filled(p.shape, 1), { stream }));
  };
  // The one sigmoid kernel of this build is the GDN gating's beta = sigmoid(b), with a zero decay branch (qwen35-ops.ts sigmoid).
  const sigmoid = (x: Tensor): Tensor => {
    const [N, C] = x.shape as [number, number];
    const r = K.gdnGating(filled([1, N, C], 0), x.reshape([1, N, C]), filled([C], 0), filled([C], 0), gdnOpts);
    own(r.g);
    return own(r.beta).reshape([N, C]);
  };
  /** Columns [start, start + len) of x [N, C], contiguous. */
  const cols = (x: Tensor, start: number, len: number): Tensor => {
    const [N, C] = [x.numel / x.shape[x.shape.length - 1]!, x.shape[x.shape.length - 1]!];
    const out = empty([N, len]);
    stridedRead(out, x, [N, len], [C, 1], start, stream);
    return out;
  };
  let mask: Tensor | undefined;
  if (inp.mode === 'prefill') {
    const m = new Int32Array(T);
    inp.rowLens.forEach((len, b) => m.fill(1, b * S, b * S + len));
    mask = own(Tensor.fromArray(device, m, [B, S], { stream }));
  }
  const kvOf = kvLayerIndex(cfg);
  let gdnLayer = 0;

  const table = ropeTable(cfg, cfg.qwen35!.rotaryDim, inp.ropeSeqLen); // over the rotary dim only
  const partialRope = (x: Tensor, heads: number): Tensor => {
    const D = cfg.headDim,
      rot = cfg.qwen35!.rotaryDim,
      N = T * heads;
    if (rot === D) return own(K.rope(x.reshape([T, heads, D]), inp.positions, table, o(PATCHES.rope)));
    const r = own(K.rope(cols(x, 0, rot).reshape([T, heads, rot]), inp.positions, table, o(PATCHES.rope)));
    // Rejoin [rotated ‖ passed] per head through the transposed layout, where both are row blocks.
    const stacked = empty([D, N]);
    stridedRead(viewOf(stacked, [rot, N]), r, [rot, N], [1, rot], 0, stream);
    stridedRead(viewOf(stacked, [D - rot, N], rot * N), x, [D - rot, N], [1, D], rot, stream);
    const out = empty([N, D]);
    stridedRead(out, stacked, [N, D], [1, N], 0, stream);
    return out.reshape([T, heads, D]);
  };

  const attention = (h: Tensor, i: number): Tensor => {
    const pre = `model.layers.${i}.self_attn`;
    const D = cfg.headDim,
      nH = ctx.shard.headsLocal,
      nKV = ctx.shard.kvHeadsLocal;
    const qkvW = w(`${pre}.qkv_proj.weight`);
    const qg = linear(h, ops.rowsOf(qkvW, 0, 2 * nH * D)).reshape([T * nH, 2 * D]); // per head [query ‖ gate]
    const headNormRope = (x: Tensor, heads: number, normName: string) =>
      partialRope(norm(x.reshape([T * heads, D]), centred(`${pre}.${normName}.weight`)), heads);
    const q = headNormRope(cols(qg, 0, D), nH, 'q_norm');
    const gate = cols(qg, D, D);
    const k = headNormRope(linear(h, ops.rowsOf(qkvW, 2 * nH * D, nKV * D)), nKV, 'k_norm');
    const v = linear(h, ops.rowsOf(qkvW, (2 * nH + nKV) * D, nKV * D));
    const attn = ops.attend(inp, kvOf[i]!, q, k, v, nH, nKV);
    const gated = own(mul(attn.reshape([T * nH, D]), sigmoid(gate), { stream }));
    return linear(gated.reshape([T, nH * D]), w(`${pre}.o_proj.weight`));
  };

  const gatedDeltaNet = (h: Tensor, i: number, l: number): Tensor => {
    const pre = `model.layers.${i}.linear_attn`;
    // This rank's heads: its conv channels are its q ‖ k ‖ v, its states its value heads'.
    const { Hk, Hv, Dk, Dv, K: Kc, C } = gdnLocal(cfg, ctx.shard);
    const convW = w(`${pre}.conv1d.weight`).reshape([C, Kc]);
    const qkv = linear(h, w(`${pre}.in_proj_qkv.weight`));
    const cache = inp.gdn;
    let conv: Tensor;
    if (inp.mode === 'prefill') {
      const r = K.causalConv1d(qkv.reshape([B, S, C]), convW, gdnOpts);
      own(r.state);
      conv = own(r.y);
      // The batch's conv state ends at the padded length; each row's is its own last K - 1 real inputs.
      if (cache) {
        inp.rowLens.forEach((len, row) => {
          const n = Math.min(len, Kc - 1);
          if (n === 0) return;
          const s = K.causalConv1d(viewOf(qkv, [1, n, C], (row * S + len - n) * C), convW, gdnOpts);
          own(s.y);
          cache.writeConvRow(l, row, own(s.state), stream);
        });
      }
    } else {
      const r = K.causalConv1d(qkv.reshape([B, 1, C]), convW, { ...gdnOpts, state: cache!.views(l, B).conv });
      conv = own(r.y);
      cache!.write(l, { conv: own(r.state) }, stream);
    }
    const flat = conv.reshape([T, C]);
    const q = cols(flat, 0, Hk * Dk).reshape([B, S, Hk, Dk]);
    const k = cols(flat, Hk * Dk, Hk * Dk).reshape([B, S, Hk, Dk]);
    const v = cols(flat, 2 * Hk * Dk, Hv * Dv).reshape([B, S, Hv, Dv]);
    const z = linear(h, w(`${pre}.in_proj_z.weight`));
    const b = linear(h, w(`${pre}.in_proj_b.weight`)).reshape([B, S, Hv]);
    const a = linear(h, w(`${pre}.in_proj_a.weight`)).reshape([B, S, Hv]);
    const gating = K.gdnGating(a, b, w(`${pre}.A_log`), w(`${pre}.dt_bias`), gdnOpts);
    own(gating.g);
    own(gating.beta);
    const rule = K.gatedDeltaRule(q, k, v, gating.g, gating.beta, {
      ...gdnOpts,
      useQkL2norm: true,
      ...(inp.mode === 'prefill' ? { mask: mask! } : { mode: 'recurrent' as const, initialState: cache!.views(l, B).rec }),
    });
    own(rule.o);
    own(rule.finalState);
    if (cache) cache.write(l, { rec: rule.finalState }, stream);
    const normed = K.gatedRmsNorm(rule.o.reshape([T * Hv, Dv]), z.reshape([T * Hv, Dv]), w(`${pre}.norm.weight`), cfg.rmsNormEps, gdnOpts);
    own(normed.rstd);
    return linear(own(normed.y).reshape([T, Hv * Dv]), w(`${pre}.out_proj.weight`));
  };

  /** The dense SwiGLU MLP, or routed experts plus sigmoid(shared_expert_gate · h) times the shared expert. */
  const mlp = (h: Tensor, i: number): Tensor => {
    const pre = `model.layers.${i}.mlp`;
    const swiglu = (gateUp: string, down: string) => linear(own(K.swigluFused(linear(h, w(gateUp)), o(PATCHES.swiglu))), w(down));
    if (!isMoeLayer(cfg, i)) return swiglu(`${pre}.gate_up_proj.weight`, `${pre}.down_proj.weight`);
    // Both halves are partial sums over tp (experts and shared expert split by columns); the
    // shared gate is a per-token scalar, so gate · Σ partials = Σ gate · partial.
    const routed = ops.routedExperts(h, `model.layers.${i}`);
    const shared = swiglu(`${pre}.shared_expert.gate_up_proj.weight`, `${pre}.shared_expert.down_proj.weight`);
    const s = sigmoid(linear(h, w(`${pre}.shared_expert_gate.weight`)));
    const gateRows = linear(s, filled([H, 1], 1)); // [T, 1] spread over H columns, as qwen35-moe.ts scaleRows
    return own(add(routed, own(mul(gateRows, shared, { stream })), { stream }));
  };

  let x = ops.embed(inp.ids);
  for (let i = 0; i < cfg.numLayers; i++) {
    const pre = `model.layers.${i}`;
    const h = norm(x, centred(`${pre}.input_layernorm.weight`));
    const mixed = isGdnLayer(cfg, i) ? gatedDeltaNet(h, i, gdnLayer++) : attention(h, i);
    allReduce(mixed);
    x = own(add(x, mixed, { stream }));
    const mlpOut = mlp(norm(x, centred(`${pre}.post_attention_layernorm.weight`)), i);
    allReduce(mlpOut);
    x = own(add(x, mlpOut, { stream }));
  }
  const rows = inp.outRows ? own(K.embedding(inp.outRows, x.reshape([T, H]), o(PATCHES.embedding))) : x;
  const hf = norm(rows, centred('model.norm.weight'));
  const lmHead = cfg.tieWordEmbeddings ? w('model.embed_tokens.weight') : w('lm_head.weight');
  return ops.head(hf, lmHead);
}
