/**
 * The tape ops Qwen3.5 needs beyond Qwen3's: splitting and joining the last dim (fused
 * projections, partial RoPE), the elementwise product, the sigmoid output gate of full
 * attention, the zero-centred RMSNorm (scale 1 + w) and the zeroing of padded tokens. They are
 * compositions of existing device ops and kernels, so they run on every device the rest of the
 * model runs on.
 */
import { add as addOp, cast, fill, matmul, mul as mulOp, transpose, Tensor } from '../runtime/device/device-index.js';
import { copyRange, narrow } from '../runtime/device/views.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import { Var, type Tape } from './autograd.js';
import * as F from './functional.js';
import { gdnGating } from './gdn-functional.js';
import type { RopeTable } from './kernels/rope.js';

const zeros = (tape: Tape, like: Tensor, shape: readonly number[]): Tensor => {
  const t = tape.own(Tensor.empty(like.device, shape, like.dtype));
  fill(t, 0, { stream: tape.stream });
  return t;
};

/** Joins 2-D tensors [N, d_i] along the last dim: each transposed into its rows of [Σd, N], then transposed back. */
function concatTensors(tape: Tape, parts: readonly Tensor[]): Tensor {
  const N = parts[0]!.shape[0]!;
  const total = parts.reduce((a, p) => a + p.shape[1]!, 0);
  const stacked = tape.own(Tensor.empty(parts[0]!.device, [total, N], parts[0]!.dtype));
  let row = 0;
  for (const p of parts) {
    const t = tape.own(transpose(p, 0, 1, { stream: tape.stream }));
    copyRange(stacked, row * N, t, 0, t.numel, tape.stream);
    row += p.shape[1]!;
  }
  return tape.own(transpose(stacked, 0, 1, { stream: tape.stream }));
}

/** x [N, C] split along the last dim into [N, sizes[i]] (Σ sizes = C). */
export function splitLast(tape: Tape, x: Var, sizes: readonly number[]): Var[] {
  const [N, C] = x.shape as [number, number];
  let start = 0;
  const outs = sizes.map((len) => {
    const y = tape.result(narrow(x.value, 1, start, len, tape.stream));
    start += len;
    return y;
  });
  if (start !== C)
    throw new InvalidArgumentError(`splitLast(): the sizes sum to ${start} but the last dim of x is ${C}; expected them to cover it exactly.`, {
      argument: 'sizes',
    });
  tape.record('splitLast', [x], outs, (dys) => [
    concatTensors(
      tape,
      dys.map((d, i) => d ?? zeros(tape, x.value, [N, sizes[i]!])),
    ),
  ]);
  return outs;
}

/** Parts [N, d_i] joined along the last dim into [N, Σd]. */
export function concatLast(tape: Tape, parts: readonly Var[]): Var {
  const y = tape.result(
    concatTensors(
      tape,
      parts.map((p) => p.value),
    ),
  );
  tape.record('concatLast', parts, [y], ([dy]) => {
    let start = 0;
    return parts.map((p) => {
      const len = p.shape[1]!;
      const g = tape.own(narrow(dy!, 1, start, len, tape.stream));
      start += len;
      return g;
    });
  });
  return y;
}

/** a * b, elementwise (same shape). */
export function mul(tape: Tape, a: Var, b: Var): Var {
  const y = tape.result(mulOp(a.value, b.value, { stream: tape.stream }));
  tape.record('mul', [a, b], [y], ([dy]) => [
    a.requiresGrad ? tape.own(mulOp(dy!, b.value, { stream: tape.stream })) : undefined,
    b.requiresGrad ? tape.own(mulOp(dy!, a.value, { stream: tape.stream })) : undefined,
  ]);
  return y;
}

/**
 * sigmoid(gate) for gate [N, C]. The GDN gating kernel's beta output is sigmoid(b) (with its
 * backward); it is the one sigmoid kernel of this build, so the gate goes through it as b with
 * a zero decay branch.
 */
export function sigmoid(tape: Tape, gate: Var): Var {
  const [N, C] = gate.shape as [number, number];
  const constant = (shape: number[]) => new Var(zeros(tape, gate.value, shape));
  const b = F.reshape(tape, gate, [1, N, C]);
  const { beta } = gdnGating(tape, constant([1, N, C]), b, constant([C]), constant([C]));
  return F.reshape(tape, beta, [N, C]);
}

/** RMSNorm of x [N, H] scaled by (1 + w): Qwen3.5 stores its norm weights centred on zero. */
export function centredRmsNorm(tape: Tape, x: Var, w: Var, eps: number): Var {
  const ones = tape.own(Tensor.empty(w.value.device, w.value.shape, w.value.dtype));
  fill(ones, 1, { stream: tape.stream });
  const scale = tape.result(addOp(w.value, ones, { stream: tape.stream }));
  tape.record('plusOne', [w], [scale], ([dy]) => [dy]);
  return F.rmsNorm(tape, x, scale, eps);
}

/**
 * RoPE on the first `rotaryDim` channels of each head of x [T, heads, D] by `table` (over
 * rotaryDim, so its scale reaches only those channels, as in HF); the rest pass through.
 */
export function partialRope(tape: Tape, x: Var, positions: Tensor, table: RopeTable, rotaryDim: number): Var {
  const [T, heads, D] = x.shape as [number, number, number];
  if (rotaryDim === D) return F.rope(tape, x, positions, table);
  const [rot, pass] = splitLast(tape, F.reshape(tape, x, [T * heads, D]), [rotaryDim, D - rotaryDim]) as [Var, Var];
  const rotated = F.rope(tape, F.reshape(tape, rot, [T, heads, rotaryDim]), positions, table);
  return F.reshape(tape, concatLast(tape, [F.reshape(tape, rotated, [T * heads, rotaryDim]), pass]), [T, heads, D]);
}

/** x [T, C] with the rows of padded tokens (mask [B, S] int32, B·S = T, 0 = pad) set to zero; no gradient reaches them. */
export function zeroPadRows(tape: Tape, x: Var, mask: Tensor): Var {
  const [T, C] = x.shape as [number, number];
  const m = tape.own(cast(mask, x.value.dtype, { stream: tape.stream })).reshape([T, 1]);
  const ones = tape.own(Tensor.empty(x.value.device, [1, C], x.value.dtype));
  fill(ones, 1, { stream: tape.stream });
  return mul(tape, x, new Var(tape.own(matmul(m, ones, { stream: tape.stream }))));
}
