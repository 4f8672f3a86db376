/**
 * Plain, obvious JS definitions of every collective: the executable spec the
 * native algorithms are tested against (tinygrad / llm.c style). Values are
 * per-rank arrays of numbers (fp32, bf16, fp16, int32) or bigints (int64).
 * Reductions fold in rank order; floats accumulate in fp32 and round once to the
 * dtype; int32 wraps; avg divides the sum by the rank count (ints truncate toward
 * zero) — exactly what native/comm/reduce.cc does.
 */
import type { DType } from '../device/dtype.js';
import type { ReduceOp } from './comm.js';

export type Values = number[] | bigint[];

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

function bitsToF32(bits: number): number {
  u32[0] = bits >>> 0;
  return f32[0]!;
}
function f32ToBits(x: number): number {
  f32[0] = x;
  return u32[0]!;
}

function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 ? 2 * Math.round(x / 2) : r;
}

/** fp32 -> bf16 -> fp32, round to nearest even. */
export function roundBF16(x: number): number {
  let u = f32ToBits(x);
  if ((u & 0x7fffffff) > 0x7f800000) return NaN;
  u = (u + 0x7fff + ((u >>> 16) & 1)) >>> 0;
  return bitsToF32((u >>> 16) << 16);
}

/** fp32 -> fp16 -> fp32, round to nearest even (as native F32ToF16 / F16ToF32). */
export function roundFP16(x: number): number {
  const bits = f32ToBits(x);
  const sign = bits >>> 31 ? -1 : 1;
  const a = bits & 0x7fffffff;
  if (a > 0x7f800000) return NaN;
  if (a >= 0x477ff000) return sign * Infinity;
  let h: number;
  if (a < 0x38800000) {
    h = roundHalfEven(bitsToF32(a) * 16777216);
  } else {
    h = (((a + 0xc8000fff + ((a >>> 13) & 1)) >>> 0) >>> 13) & 0x7fff;
  }
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** The value `x` becomes when stored as `dtype`. */
export function roundTo(dtype: DType, x: number): number {
  switch (dtype) {
    case 'fp32':
      return Math.fround(x);
    case 'bf16':
      return roundBF16(x);
    case 'fp16':
      return roundFP16(x);
    case 'int32':
      return x | 0;
    default:
      return x;
  }
}

function combineNum(dtype: DType, op: ReduceOp, a: number, b: number): number {
  const isInt = dtype === 'int32';
  switch (op) {
    case 'sum':
    case 'avg':
      return isInt ? (a + b) | 0 : Math.fround(a + b);
    case 'prod':
      return isInt ? Math.imul(a, b) : Math.fround(a * b);
    case 'max':
      return b > a ? b : a;
    case 'min':
      return b < a ? b : a;
  }
}

function combineBig(op: ReduceOp, a: bigint, b: bigint): bigint {
  switch (op) {
    case 'sum':
    case 'avg':
      return BigInt.asIntN(64, a + b);
    case 'prod':
      return BigInt.asIntN(64, a * b);
    case 'max':
      return b > a ? b : a;
    case 'min':
      return b < a ? b : a;
  }
}

/** Elementwise reduction of `inputs` (one array per rank, same length). */
export function reduce(inputs: readonly Values[], dtype: DType, op: ReduceOp): Values {
  const P = inputs.length;
  const n = inputs[0]!.length;
  if (dtype === 'int64') {
    const ins = inputs as bigint[][];
    const out = new Array<bigint>(n);
    for (let i = 0; i < n; i++) {
      let acc = ins[0]![i]!;
      for (let q = 1; q < P; q++) acc = combineBig(op, acc, ins[q]![i]!);
      out[i] = op === 'avg' ? acc / BigInt(P) : acc;
    }
    return out;
  }
  const ins = inputs as number[][];
  const out = new Array<number>(n);
  for (let i = 0; i < n; i++) {
    let acc = ins[0]![i]!;
    for (let q = 1; q < P; q++) acc = combineNum(dtype, op, acc, ins[q]![i]!);
    if (op === 'avg') acc = dtype === 'int32' ? Math.trunc(acc / P) : Math.fround(acc / P);
    out[i] = roundTo(dtype, acc);
  }
  return out;
}

function slice(v: Values, start: number, end: number): Values {
  return v.slice(start, end) as Values;
}

function concat(parts: readonly Values[]): Values {
  return ([] as Array<number | bigint>).concat(...(parts as Array<Array<number | bigint>>)) as Values;
}

export function allReduce(inputs: readonly Values[], dtype: DType, op: ReduceOp): Values[] {
  const r = reduce(inputs, dtype, op);
  return inputs.map(() => r);
}

export function broadcast(inputs: readonly Values[], root: number): Values[] {
  return inputs.map(() => inputs[root]!);
}

export function allGather(inputs: readonly Values[]): Values[] {
  const all = concat(inputs);
  return inputs.map(() => all);
}

/** inputs[q] has P x count elements; rank r gets chunk r of the reduction. */
export function reduceScatter(inputs: readonly Values[], dtype: DType, op: ReduceOp): Values[] {
  const P = inputs.length;
  const count = inputs[0]!.length / P;
  const full = reduce(inputs, dtype, op);
  return inputs.map((_, r) => slice(full, r * count, (r + 1) * count));
}

export function allToAll(inputs: readonly Values[]): Values[] {
  const P = inputs.length;
  const count = inputs[0]!.length / P;
  return inputs.map((_, r) => concat(inputs.map((v) => slice(v, r * count, (r + 1) * count))));
}

/**
 * sendCounts[q][r] / sendDispls[q][r]: what rank q sends to r; recvCounts[r][q] /
 * recvDispls[r][q]: where rank r puts what it gets from q; `recvInit[r]` is rank r's
 * recv before the call (untouched elements keep their values).
 */
export function allToAllV(
  inputs: readonly Values[],
  sendCounts: readonly (readonly number[])[],
  sendDispls: readonly (readonly number[])[],
  recvCounts: readonly (readonly number[])[],
  recvDispls: readonly (readonly number[])[],
  recvInit: readonly Values[],
): Values[] {
  return recvInit.map((init, r) => {
    const out = init.slice() as Array<number | bigint>;
    inputs.forEach((v, q) => {
      const n = recvCounts[r]![q]!;
      for (let i = 0; i < n; i++) out[recvDispls[r]![q]! + i] = v[sendDispls[q]![r]! + i]!;
    });
    return out as Values;
  });
}
