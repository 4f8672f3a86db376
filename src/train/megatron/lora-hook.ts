/**
 * LoRA on megatron's parallel linears and experts: the ParallelLinearHook / MoE hook
 * a MegatronStrategy with `lora` installs (shards: lora-shards.ts).
 *
 * - linear_qkv (column): y = x·W_localᵀ + s·interleave(Δq, Δk, Δv), where Δm =
 *   (drop_m(x)·A_mᵀ)·B_m,localᵀ is module m's update on THIS rank's heads (B split on
 *   rows), placed into Megatron's per-query-group interleaved layout (for each local KV
 *   group j: its g query heads, k_j, v_j) so the split that follows hands q/k/v their
 *   own updates. A module without an adapter contributes zeros.
 * - linear_fc1 (column, gate ‖ up of this rank's features): the same with Δgate ‖ Δup.
 * - linear_proj / linear_fc2 (row): x_local·W_localᵀ + s·(x_local·A_localᵀ)·Bᵀ, a partial
 *   sum that the tp all-reduce after the hook completes (the LoRA output is added
 *   before the all-reduce).
 * - Gated DeltaNet projections (replicated, whole on every TP rank): x·Wᵀ + s·(x·Aᵀ)·Bᵀ,
 *   adapters whole too. The shared expert's fc1 / fc2 as the dense MLP's; a gated q_proj's
 *   update fills its query and gate blocks of each head (2·g blocks per KV group).
 * - experts: grouped LoRA over the local experts (tokens sorted by local expert).
 * Dropout masks are windows of the single-device global mask (dropoutMaskWindow):
 * this dp rank's token rows and, for row-parallel inputs, this TP rank's columns.
 */
import { copy, fill, permute, Tensor } from '../../runtime/device/device-index.js';
import type { Tape, Var } from '../../model/autograd.js';
import type { ModelConfig } from '../../model/config.js';
import * as F from '../../model/functional.js';
import type { LoraAdapters } from '../../model/lora.js';
import { addScaled, applyMask, dropoutMaskWindow, loraGrouped } from '../../model/lora-ops.js';
import { fusedExpertNames } from '../../model/params.js';
import type { ParallelMode } from './parallel-mode.js';
import { qkvQueryHeads } from './specs.js';
import { viewOf } from './views.js';

/** The Megatron linears LoRA can adapt: the module after `decoder.layers.<i>.`. */
const MEGATRON_LINEAR =
  /^decoder\.layers\.(\d+)\.(self_attention\.(?:linear_qkv|linear_proj|in_proj_qkv|in_proj_z|in_proj_b|in_proj_a|out_proj)|mlp\.linear_fc[12]|mlp\.shared_experts\.linear_fc[12])\.weight$/;

/** The HF module of a row-parallel Megatron linear (the rest are GDN projections: `linear_attn.<name>`). */
const SINGLE_BASE: Record<string, string> = {
  'self_attention.linear_proj': 'self_attn.o_proj',
  'mlp.linear_fc2': 'mlp.down_proj',
  'mlp.shared_experts.linear_fc2': 'mlp.shared_expert.down_proj',
};

/** One part of an interleaved output: `slots` slots of width D per group (absent: zeros). */
interface Part {
  v: Var | undefined;
  slots: number;
}

/**
 * Differentiable y [T, G·S·D] with y[t, g, slots of part i, :] = part i [t, g, :, :]
 * (S = Σ slots): a part of s slots is [T, G·s·D]. Exact (copies and permutes only).
 */
export function interleaveParts(tape: Tape, parts: readonly Part[], T: number, G: number, D: number): Var {
  const stream = tape.stream;
  const device = parts.find((p) => p.v)!.v!.value.device;
  const S = parts.reduce((a, p) => a + p.slots, 0);
  const slot = T * G * D;
  const buf = tape.own(Tensor.empty(device, [S, T, G, D], 'fp32'));
  let o = 0;
  for (const p of parts) {
    const dst = viewOf(buf, o * slot, [p.slots, T, G, D]);
    if (!p.v) fill(dst, 0, { stream });
    else if (p.slots === 1) copy(dst, p.v.value.reshape([1, T, G, D]), { stream });
    else {
      const t = permute(p.v.value.reshape([T, G, p.slots, D]), [2, 0, 1, 3], { stream });
      copy(dst, t, { stream });
      t.release();
    }
    o += p.slots;
  }
  const y = tape.result(permute(buf, [1, 2, 0, 3], { stream }).reshape([T, G * S * D]));
  const inputs = parts.flatMap((p) => (p.v ? [p.v] : []));
  tape.record('loraInterleave', inputs, [y], ([dy]) => {
    const bySlot = tape.own(permute(dy!.reshape([T, G, S, D]), [2, 0, 1, 3], { stream }));
    const grads: Tensor[] = [];
    let q = 0;
    for (const p of parts) {
      const src = viewOf(bySlot, q * slot, [p.slots, T, G, D]);
      q += p.slots;
      if (!p.v) continue;
      if (p.slots === 1) {
        const g = tape.own(Tensor.empty(device, [T, G * D], 'fp32'));
        copy(g, src.reshape([T, G * D]), { stream });
        grads.push(g);
      } else grads.push(tape.own(permute(src, [1, 2, 0, 3], { stream })).reshape([T, G * p.slots * D]));
    }
    return grads;
  });
  return y;
}

/** Where this forward's tokens and this rank's shard sit (for dropout masks). */
export interface LoraForwardWindow {
  seed: number | null;
  /** First token row of this rank and total token rows of the global batch. */
  row0: number;
  total: number;
  /** This rank's sequences trimmed from `global` to `local` positions (rows.ts trimmedWidth); absent: untrimmed. */
  seq?: { global: number; local: number };
}

export class MegatronLoraHook {
  /** Set by the strategy before each forward (null seed: no dropout). */
  window: LoraForwardWindow = { seed: null, row0: 0, total: 0 };

  constructor(
    readonly adapters: LoraAdapters,
    private readonly cfg: ModelConfig,
    private readonly tp: number,
    private readonly tpRank: number,
    /** This rank's adapter Var by PEFT name. */
    private readonly local: (name: string) => Var,
  ) {}

  /** The ParallelLinearHook. */
  linear(tape: Tape, x: Var, w: Var, name: string, mode: ParallelMode): Var | undefined {
    const m = MEGATRON_LINEAR.exec(name);
    if (!m) return undefined;
    const hf = `model.layers.${m[1]}`;
    const s = this.adapters.scaling;
    const mod = m[2]!;
    if (mode !== 'column') {
      // Row parallel: the partial sums' all-reduce after the hook completes the LoRA term too. Replicated: whole.
      const base = `${hf}.${SINGLE_BASE[mod] ?? `linear_attn.${mod.slice('self_attention.'.length)}`}.weight`;
      const t = this.adapters.target(base);
      if (!t) return undefined;
      const delta = F.linear(tape, F.linear(tape, this.dropped(tape, x, base, mode === 'row'), this.local(t.a)), this.local(t.b));
      return addScaled(tape, F.linear(tape, x, w), delta, s);
    }
    const T = x.value.shape[0]!;
    const { headDim: D, numKvHeads: nKV } = this.cfg;
    const qkv = mod === 'self_attention.linear_qkv';
    const mlp = mod === 'mlp.linear_fc1' ? 'mlp' : 'mlp.shared_expert';
    const modules = qkv
      ? ([
          // A gated q_proj has a query and a gate block per head: 2·g blocks per KV group.
          ['self_attn.q_proj', qkvQueryHeads(this.cfg) / nKV],
          ['self_attn.k_proj', 1],
          ['self_attn.v_proj', 1],
        ] as const)
      : ([
          [`${mlp}.gate_proj`, 1],
          [`${mlp}.up_proj`, 1],
        ] as const);
    const parts: Part[] = modules.map(([mod, slots]) => {
      const base = `${hf}.${mod}.weight`;
      const t = this.adapters.target(base);
      return { slots, v: t && F.linear(tape, F.linear(tape, this.dropped(tape, x, base, false), this.local(t.a)), this.local(t.b)) };
    });
    if (!parts.some((p) => p.v)) return undefined;
    const I = () => (mlp === 'mlp' ? this.cfg.intermediateSize : this.cfg.moe!.sharedExpertIntermediateSize!);
    const [G, width] = qkv ? [nKV / this.tp, D] : [1, I() / this.tp];
    return addScaled(tape, F.linear(tape, x, w), interleaveParts(tape, parts, T, G, width), s);
  }

  /** MoE adapters over this rank's stacked local experts (F.MoeAdapters). */
  moe(tape: Tape, layer: number): Partial<F.MoeAdapters> | undefined {
    const names = fusedExpertNames(layer);
    const gu = this.adapters.target(names.gateUp);
    const dn = this.adapters.target(names.down);
    if (!gu && !dn) return undefined;
    const s = this.adapters.scaling;
    const out: Partial<F.MoeAdapters> = {};
    if (gu) out.gateUp = (tp, xs, w, offsets) => loraGrouped(tp, xs, w, this.local(gu.a), this.local(gu.b), s, offsets, 'experts.gate_up');
    if (dn) out.down = (tp, xs, w, offsets) => loraGrouped(tp, xs, w, this.local(dn.a), this.local(dn.b), s, offsets, 'experts.down');
    return out;
  }

  /** x with module `base`'s dropout mask applied (the global mask's window for this rank). */
  private dropped(tape: Tape, x: Var, base: string, rowParallel: boolean): Var {
    const p = this.adapters.config.dropout;
    const { seed, row0, total, seq } = this.window;
    if (p === 0 || seed === null) return x;
    const [rows, cols] = x.value.shape as [number, number];
    const fullCols = rowParallel ? cols * this.tp : cols;
    const col0 = rowParallel ? this.tpRank * cols : 0;
    const host = dropoutMaskWindow(seed, base, p, { rows: total, cols: fullCols }, { row0, rows, col0, cols, ...(seq ? { seq } : {}) });
    return applyMask(tape, x, tape.own(Tensor.fromArray(x.value.device, host, x.value.shape, { stream: tape.stream })));
  }
}
