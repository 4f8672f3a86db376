/**
 * The LoRA forward ops on the tape:
 *   y = x·Wᵀ + s · (drop(x)·Aᵀ)·Bᵀ                       (dense, W [out, in], A [r, in], B [out, r])
 *   y = grouped(xs, W) + s · grouped(grouped(xs, A), B)   (fused experts, W [E, out, in], A [E, r, in], B [E, out, r])
 * Gradients flow to A, B and x; W gets none when it does not require grad (frozen base).
 *
 * Dropout is a host-generated mask, uploaded: each element keeps with probability 1 − p and
 * is scaled by 1 / (1 − p) (inverted dropout, as torch.nn.Dropout). The mask depends only on
 * (step seed, base weight name, shape), so it is deterministic for a seed and the same when a
 * forward is recomputed (activation checkpointing). Cost: one host → device upload of
 * [T, in] floats per adapted projection and step; fine for the model sizes here, and the
 * place to swap in an on-device Philox kernel later.
 */
import { axpy, copy, mul, scale, Tensor } from '../runtime/device/device-index.js';
import type { Tape, Var } from './autograd.js';
import * as F from './functional.js';
import { hashString, mixSeed, Prng } from './prng.js';

/** y = a + s·b (same shape). */
export function addScaled(tape: Tape, a: Var, b: Var, s: number): Var {
  const o = { stream: tape.stream };
  const yt = tape.own(Tensor.empty(a.value.device, a.value.shape, a.value.dtype));
  copy(yt, a.value, o);
  axpy(yt, s, b.value, o);
  const y = tape.result(yt);
  tape.record('loraAddScaled', [a, b], [y], ([dy]) => [dy, b.requiresGrad ? tape.own(scale(dy!, s, o)) : undefined]);
  return y;
}

/** x ⊙ mask, where `mask` already carries the 1 / (1 − p) factor. */
export function applyMask(tape: Tape, x: Var, mask: Tensor): Var {
  const o = { stream: tape.stream };
  const y = tape.result(mul(x.value, mask, o));
  tape.record('loraDropout', [x], [y], ([dy]) => [tape.own(mul(dy!, mask, o))]);
  return y;
}

/**
 * The inverted-dropout mask for one adapted projection: n values, each 0 (probability p)
 * or 1 / (1 − p), from (seed, name) only. Exported so tests can rebuild it on the host.
 */
export function dropoutMask(seed: number, name: string, n: number, p: number): Float32Array {
  const rng = new Prng(mixSeed(seed) ^ hashString(name));
  const keep = 1 / (1 - p);
  const m = new Float32Array(n);
  for (let i = 0; i < n; i++) m[i] = rng.next() < p ? 0 : keep;
  return m;
}

/**
 * The window of a global dropout mask that one shard of the input sees: rows
 * [row0, row0 + rows) and columns [col0, col0 + cols) of the [totalRows, totalCols] mask
 * that dropoutMask(seed, name, totalRows·totalCols, p) gives for the whole batch. A
 * data-parallel rank (its rows) or a row-parallel TP rank (its input columns) applies
 * exactly the entries the single-device run applies to the same elements. With `seq`, the
 * window's rows are token rows of sequences trimmed from `global` to `local` positions
 * (rows.ts trimmedWidth): window row r is global token row row0 + ⌊r/local⌋·global + r mod local.
 */
export function dropoutMaskWindow(
  seed: number,
  name: string,
  p: number,
  total: { rows: number; cols: number },
  win: { row0: number; rows: number; col0: number; cols: number; seq?: { global: number; local: number } },
): Float32Array {
  const full = dropoutMask(seed, name, total.rows * total.cols, p);
  const seq = win.seq && win.seq.local !== win.seq.global ? win.seq : null;
  if (!seq && win.col0 === 0 && win.cols === total.cols) return full.slice(win.row0 * total.cols, (win.row0 + win.rows) * total.cols);
  const out = new Float32Array(win.rows * win.cols);
  for (let r = 0; r < win.rows; r++) {
    const row = seq ? win.row0 + Math.floor(r / seq.local) * seq.global + (r % seq.local) : win.row0 + r;
    const src = row * total.cols + win.col0;
    out.set(full.subarray(src, src + win.cols), r * win.cols);
  }
  return out;
}

/** Dense LoRA projection; `mask` (same shape as x) applies dropout to the adapter input. */
export function loraLinear(tape: Tape, x: Var, w: Var, a: Var, b: Var, s: number, mask?: Tensor): Var {
  const base = F.linear(tape, x, w);
  const xin = mask ? applyMask(tape, x, mask) : x;
  return addScaled(tape, base, F.linear(tape, F.linear(tape, xin, a), b), s);
}

/** Grouped (per-expert) LoRA projection over tokens sorted by expert (device-side offsets). */
export function loraGrouped(tape: Tape, xs: Var, w: Var, a: Var, b: Var, s: number, offsets: Tensor, name: string): Var {
  const base = F.groupedLinear(tape, xs, w, offsets, name);
  const down = F.groupedLinear(tape, xs, a, offsets, `${name}.lora_A`);
  return addScaled(tape, base, F.groupedLinear(tape, down, b, offsets, `${name}.lora_B`), s);
}
