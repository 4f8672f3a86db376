/**
 * Device ops. Each validates everything in TS with precise messages (tensors live,
 * on the stream's device, dtypes and shapes), then enqueues one native op with
 * plain numbers and buffer handles (buffer[BUFFER_HANDLE]: native reads a handle without the
 * property lookup a buffer object costs it, ~1k instructions per buffer argument). Nothing is
 * allocated or enqueued when validation fails.
 * `impl: 'reference'` runs the plain reference kernel (tests compare the two).
 */
import { DeviceBuffer } from './buffer.js';
import { Device, checkOptions } from './device.js';
import { DTYPE_CODE, checkDType, describe, dtypeSize, isFloatDType, type DType } from './dtype.js';
import { InvalidArgumentError } from '../errors.js';
import { BUFFER_HANDLE } from '../native.js';
import type { Stream } from './stream.js';
import { Tensor, resolveStream } from './tensor.js';

export type KernelImpl = 'fast' | 'reference';

export interface OpOptions {
  /** Stream to enqueue on (default: the device's default stream). */
  stream?: Stream;
  /** Kernel implementation (default 'fast'). */
  impl?: KernelImpl;
}

const OP_KEYS = ['stream', 'impl'] as const;

function implCode(impl: unknown): number {
  if (impl === undefined || impl === 'fast') return 0;
  if (impl === 'reference') return 1;
  throw new InvalidArgumentError(`Expected 'fast' or 'reference' for impl but received ${describe(impl)}.`, { argument: 'impl' });
}

function checkTensor(t: unknown, name: string): Tensor {
  if (!(t instanceof Tensor)) throw new InvalidArgumentError(`Expected a Tensor for ${name} but received ${describe(t)}.`, { argument: name });
  t.checkLive(name);
  if (!t.isContiguous) throw new InvalidArgumentError(`Tensor ${name} must be contiguous. HINT: use permute() to make a contiguous copy.`, { argument: name });
  return t;
}

/** Resolves the stream and checks that every named tensor is on its device. */
function placement(
  fn: string,
  tensors: Record<string, Tensor>,
  options: OpOptions | undefined,
  extraKeys: readonly string[] = [],
): { stream: Stream; impl: number } {
  checkOptions(options, [...OP_KEYS, ...extraKeys], `${fn}()`);
  const names = Object.keys(tensors);
  const first = tensors[names[0]!]!;
  const stream = resolveStream(options?.stream, first.device, `${fn}()`);
  for (const name of names) checkOnStreamDevice(fn, stream, tensors[name]!, name);
  return { stream, impl: implCode(options?.impl) };
}

function checkOnStreamDevice(fn: string, stream: Stream, t: Tensor, name: string): void {
  const sd = stream.device.ordinal;
  if (t.device.ordinal !== sd) {
    throw new InvalidArgumentError(
      `Expected tensors on device ${sd} but ${name} is on device ${t.device.ordinal} (stream belongs to device ${sd}). HINT: use copyPeer() to move it first.`,
      { op: fn, argument: name, expectedDevice: sd, actualDevice: t.device.ordinal, streamDevice: sd },
    );
  }
}

function sameDType(fn: string, tensors: Record<string, Tensor>): DType {
  const entries = Object.entries(tensors);
  const [n0, t0] = entries[0]!;
  for (const [n, t] of entries.slice(1)) {
    if (t.dtype !== t0.dtype) {
      throw new InvalidArgumentError(`${fn}() expects one dtype but ${n0} is ${t0.dtype} and ${n} is ${t.dtype}. HINT: cast() one of them first.`, { op: fn });
    }
  }
  return t0.dtype;
}

function sameShape(fn: string, a: Tensor, b: Tensor, an: string, bn: string): void {
  if (a.shape.length !== b.shape.length || a.shape.some((d, i) => d !== b.shape[i])) {
    throw new InvalidArgumentError(
      `${fn}() expects equal shapes but ${an} is [${a.shape.join(', ')}] and ${bn} is [${b.shape.join(', ')}] (broadcasting is not supported).`,
      { op: fn },
    );
  }
}

function checkFloatDType(fn: string, dtype: DType): void {
  if (!isFloatDType(dtype))
    throw new InvalidArgumentError(`${fn}() supports fp32, bf16 and fp16 but received ${dtype}. HINT: cast() to fp32 first.`, { op: fn, dtype });
}

function checkNumber(value: unknown, what: string): number {
  if (typeof value !== 'number') throw new InvalidArgumentError(`Expected a number for ${what} but received ${describe(value)}.`, { argument: what });
  return value;
}

/** Allocates the output; released again if the enqueue fails so a failed op leaves no allocation behind. */
function withOutput(device: Device, shape: readonly number[], dtype: DType, enqueue: (out: Tensor) => void): Tensor {
  const out = Tensor.empty(device, shape, dtype);
  try {
    enqueue(out);
  } catch (e) {
    out.release();
    throw e;
  }
  return out;
}

/** Sets every element of `t` to `value` (in place). */
export function fill(t: Tensor, value: number, options?: OpOptions): void {
  checkTensor(t, 't');
  checkNumber(value, 'value');
  const { stream, impl } = placement('fill', { t }, options);
  stream.native.fill(t.buffer[BUFFER_HANDLE], t.byteOffset, t.numel, DTYPE_CODE[t.dtype], value, impl, 0);
}

export interface ArangeOptions extends OpOptions {
  start?: number;
  step?: number;
  dtype?: DType;
}

/** [start, start + step, ...] with `n` elements (computed in double, then stored). */
export function arange(device: Device, n: number, options?: ArangeOptions): Tensor {
  if (!(device instanceof Device)) throw new InvalidArgumentError(`Expected a Device for arange() but received ${describe(device)}.`);
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0)
    throw new InvalidArgumentError(`Expected a non-negative integer for n but received ${describe(n)}.`);
  checkOptions(options, [...OP_KEYS, 'start', 'step', 'dtype'], 'arange()');
  const start = options?.start === undefined ? 0 : checkNumber(options.start, 'start');
  const step = options?.step === undefined ? 1 : checkNumber(options.step, 'step');
  const dtype = options?.dtype === undefined ? 'fp32' : checkDType(options.dtype);
  const stream = resolveStream(options?.stream, device, 'arange()');
  if (stream.device.ordinal !== device.ordinal) {
    throw new InvalidArgumentError(`Expected a stream of device ${device.ordinal} for arange() but the stream belongs to device ${stream.device.ordinal}.`, {
      expectedDevice: device.ordinal,
      streamDevice: stream.device.ordinal,
    });
  }
  const impl = implCode(options?.impl);
  return withOutput(device, [n], dtype, (out) => stream.native.arange(out.buffer[BUFFER_HANDLE], 0, n, DTYPE_CODE[dtype], start, step, impl, 0));
}

/** Converts to `dtype` (fp32 -> bf16/fp16 round to nearest even; float -> int truncates and saturates). */
export function cast(x: Tensor, dtype: DType, options?: OpOptions): Tensor {
  checkTensor(x, 'x');
  const dt = checkDType(dtype);
  const { stream, impl } = placement('cast', { x }, options);
  return withOutput(x.device, x.shape, dt, (out) =>
    stream.native.cast(out.buffer[BUFFER_HANDLE], 0, DTYPE_CODE[dt], x.buffer[BUFFER_HANDLE], x.byteOffset, DTYPE_CODE[x.dtype], x.numel, impl, 0),
  );
}

function binary(fn: 'add' | 'mul', code: number, a: Tensor, b: Tensor, options?: OpOptions): Tensor {
  checkTensor(a, 'a');
  checkTensor(b, 'b');
  const { stream, impl } = placement(fn, { a, b }, options);
  const dtype = sameDType(fn, { a, b });
  sameShape(fn, a, b, 'a', 'b');
  return withOutput(a.device, a.shape, dtype, (out) =>
    stream.native.binary(
      code,
      DTYPE_CODE[dtype],
      out.buffer[BUFFER_HANDLE],
      0,
      a.buffer[BUFFER_HANDLE],
      a.byteOffset,
      b.buffer[BUFFER_HANDLE],
      b.byteOffset,
      a.numel,
      impl,
      0,
    ),
  );
}

/** a + b, elementwise, same dtype and shape (integers wrap). */
export function add(a: Tensor, b: Tensor, options?: OpOptions): Tensor {
  return binary('add', 0, a, b, options);
}

/** a * b, elementwise, same dtype and shape (integers wrap). */
export function mul(a: Tensor, b: Tensor, options?: OpOptions): Tensor {
  return binary('mul', 1, a, b, options);
}

/** alpha * x (float dtypes, computed in fp32). */
export function scale(x: Tensor, alpha: number, options?: OpOptions): Tensor {
  checkTensor(x, 'x');
  checkNumber(alpha, 'alpha');
  const { stream, impl } = placement('scale', { x }, options);
  checkFloatDType('scale', x.dtype);
  return withOutput(x.device, x.shape, x.dtype, (out) =>
    stream.native.scale(DTYPE_CODE[x.dtype], out.buffer[BUFFER_HANDLE], 0, x.buffer[BUFFER_HANDLE], x.byteOffset, x.numel, alpha, impl, 0),
  );
}

/**
 * x ← alpha * x, in place (float dtypes, computed in fp32): scale() with x as its own output.
 * Exact in place: each element is read once, before it is written. One op where scale() and a
 * copy back would be two.
 */
export function scaleElementsInPlace(x: Tensor, alpha: number, options?: OpOptions): void {
  checkTensor(x, 'x');
  checkNumber(alpha, 'alpha');
  const { stream, impl } = placement('scale', { x }, options);
  checkFloatDType('scale', x.dtype);
  stream.native.scale(DTYPE_CODE[x.dtype], x.buffer[BUFFER_HANDLE], x.byteOffset, x.buffer[BUFFER_HANDLE], x.byteOffset, x.numel, alpha, impl, 0);
}

/** y += alpha * x, in place (float dtypes, computed in fp32). */
export function axpy(y: Tensor, alpha: number, x: Tensor, options?: OpOptions): void {
  checkTensor(y, 'y');
  checkTensor(x, 'x');
  checkNumber(alpha, 'alpha');
  const { stream, impl } = placement('axpy', { y, x }, options);
  const dtype = sameDType('axpy', { y, x });
  checkFloatDType('axpy', dtype);
  sameShape('axpy', y, x, 'y', 'x');
  stream.native.axpy(DTYPE_CODE[dtype], y.buffer[BUFFER_HANDLE], y.byteOffset, x.buffer[BUFFER_HANDLE], x.byteOffset, x.numel, alpha, impl, 0);
}

/** Contiguous copy of x with its dims reordered: out.shape[i] = x.shape[dims[i]]. */
export function permute(x: Tensor, dims: readonly number[], options?: OpOptions): Tensor {
  checkTensor(x, 'x');
  const rank = x.shape.length;
  if (!Array.isArray(dims) || dims.length !== rank || [...dims].sort((p, q) => p - q).some((d, i) => d !== i)) {
    throw new InvalidArgumentError(
      `Expected a permutation of [0..${rank - 1}] for dims but received ${Array.isArray(dims) ? `[${dims.join(', ')}]` : describe(dims)}.`,
      { argument: 'dims', rank },
    );
  }
  const { stream, impl } = placement('permute', { x }, options);
  const shape = dims.map((d) => x.shape[d]!);
  const srcStrides = dims.map((d) => x.strides[d]!);
  return withOutput(x.device, shape, x.dtype, (out) =>
    stream.native.permute(dtypeSize(x.dtype), out.buffer[BUFFER_HANDLE], 0, x.buffer[BUFFER_HANDLE], x.byteOffset, shape, srcStrides, impl, 0),
  );
}

/** Contiguous copy with dims d0 and d1 swapped (default: the last two). */
export function transpose(x: Tensor, d0 = -2, d1 = -1, options?: OpOptions): Tensor {
  checkTensor(x, 'x');
  const rank = x.shape.length;
  const norm = (d: number, name: string): number => {
    if (typeof d !== 'number' || !Number.isInteger(d) || d < -rank || d >= rank) {
      throw new InvalidArgumentError(`Expected a dim in [${-rank}, ${rank}) for ${name} but received ${describe(d)}.`, { argument: name, rank });
    }
    return d < 0 ? d + rank : d;
  };
  const a = norm(d0, 'd0'),
    b = norm(d1, 'd1');
  const dims = Array.from({ length: rank }, (_, i) => i);
  dims[a] = b;
  dims[b] = a;
  return permute(x, dims, options);
}

export interface MatmulOptions extends OpOptions {
  transA?: boolean;
  transB?: boolean;
  /** fp32 (default) or bf16; accumulation is always fp32. */
  outDtype?: DType;
}

const MATMUL_KEYS: readonly string[] = [...OP_KEYS, 'transA', 'transB', 'outDtype'];

/**
 * checkOptions(options, MATMUL_KEYS, 'matmul()') without its key list: a plain options object
 * whose own keys are all matmul's passes here, and anything else goes to checkOptions, which
 * throws its usual message (Object.keys' array per call was a visible part of a 64 x 64 matmul).
 */
function checkMatmulOptions(options: unknown): void {
  if (options === undefined) return;
  if (typeof options === 'object' && options !== null && !Array.isArray(options)) {
    let known = true;
    for (const key in options) {
      if (!Object.prototype.hasOwnProperty.call(options, key)) continue;
      if (key !== 'stream' && key !== 'impl' && key !== 'transA' && key !== 'transB' && key !== 'outDtype') {
        known = false;
        break;
      }
    }
    if (known) return;
  }
  checkOptions(options, MATMUL_KEYS, 'matmul()');
}

/**
 * C = op(A) . op(B). A is [M, K] ([K, M] with transA), B is [K, N] ([N, K] with
 * transB), optionally with one leading batch dim on both. fp32 or bf16 inputs.
 *
 * The same checks as every op, in the same order and words, written out for two tensors: at
 * n = 64 the kernel takes ~3 us and the generic helpers' temporaries (key lists, entries,
 * slices, the output's shape copied and checked again) were a measurable part of the rest.
 */
export function matmul(a: Tensor, b: Tensor, options?: MatmulOptions): Tensor {
  checkTensor(a, 'a');
  checkTensor(b, 'b');
  checkMatmulOptions(options);
  const stream = resolveStream(options?.stream, a.device, 'matmul()');
  checkOnStreamDevice('matmul', stream, a, 'a');
  checkOnStreamDevice('matmul', stream, b, 'b');
  const impl = implCode(options?.impl);
  const transA = options?.transA ?? false,
    transB = options?.transB ?? false;
  if (typeof transA !== 'boolean' || typeof transB !== 'boolean') throw new InvalidArgumentError('Expected booleans for transA and transB.');
  const dtype = a.dtype;
  if (b.dtype !== dtype) {
    throw new InvalidArgumentError(`matmul() expects one dtype but a is ${dtype} and b is ${b.dtype}. HINT: cast() one of them first.`, { op: 'matmul' });
  }
  if (dtype !== 'fp32' && dtype !== 'bf16')
    throw new InvalidArgumentError(`matmul() supports fp32 and bf16 inputs but received ${dtype}. HINT: cast() first.`, { dtype });
  const outDtype = options?.outDtype === undefined ? 'fp32' : checkDType(options.outDtype, 'outDtype');
  if (outDtype !== 'fp32' && outDtype !== 'bf16') throw new InvalidArgumentError(`matmul() outDtype must be fp32 or bf16 but received ${outDtype}.`);
  const as = a.shape,
    bs = b.shape;
  const rank = as.length;
  if ((rank !== 2 && rank !== 3) || bs.length !== rank) {
    throw new InvalidArgumentError(`matmul() expects a and b both 2-D or both 3-D (batched) but received [${as.join(', ')}] and [${bs.join(', ')}].`);
  }
  const batch = rank === 3 ? as[0]! : 1;
  if (rank === 3 && bs[0] !== batch) {
    throw new InvalidArgumentError(`matmul() batch sizes differ: a has ${batch} and b has ${bs[0]}.`);
  }
  const ar = as[rank - 2]!,
    ac = as[rank - 1]!,
    br = bs[rank - 2]!,
    bc = bs[rank - 1]!;
  const m = transA ? ac : ar,
    k = transA ? ar : ac;
  const kb = transB ? bc : br,
    n = transB ? br : bc;
  if (k !== kb) {
    throw new InvalidArgumentError(`matmul() inner dims differ: op(a) is [${m}, ${k}] and op(b) is [${kb}, ${n}] (transA=${transA}, transB=${transB}).`, {
      m,
      k,
      kb,
      n,
      transA,
      transB,
    });
  }
  // The native call makes the output block itself (one call, not alloc() then matmul(), and nothing
  // is allocated when it throws). The shape is valid by construction (the inputs' dims), so the
  // output skips Tensor.empty's shape check: a fresh array kept without a copy (Tensor.own), or,
  // 2-D, the frozen layout of the last 2-D output of the same dims (Tensor.ownMatrix).
  const handle = stream.native.matmul(
    DTYPE_CODE[dtype],
    DTYPE_CODE[outDtype],
    a.buffer[BUFFER_HANDLE],
    a.byteOffset,
    b.buffer[BUFFER_HANDLE],
    b.byteOffset,
    null,
    0,
    batch,
    m,
    n,
    k,
    transA,
    transB,
    impl,
    0,
  );
  const buffer = new DeviceBuffer(handle);
  return rank === 3 ? Tensor.own(a.device, buffer, outDtype, [batch, m, n]) : Tensor.ownMatrix(a.device, buffer, outDtype, m, n);
}

/** dst <- src on one device (same dtype and numel). */
export function copy(dst: Tensor, src: Tensor, options?: { stream?: Stream }): void {
  checkTensor(dst, 'dst');
  checkTensor(src, 'src');
  const { stream } = placement('copy', { dst, src }, options);
  checkCopy('copy', dst, src);
  stream.native.copyD2D(dst.buffer[BUFFER_HANDLE], dst.byteOffset, src.buffer[BUFFER_HANDLE], src.byteOffset, src.nbytes, 0);
}

/**
 * dst <- src across devices: the only op allowed to touch two devices. Enqueued on
 * `stream` (default: dst's default stream), which must belong to dst's or src's device.
 */
export function copyPeer(dst: Tensor, src: Tensor, options?: { stream?: Stream }): void {
  checkTensor(dst, 'dst');
  checkTensor(src, 'src');
  checkOptions(options, ['stream'], 'copyPeer()');
  const stream = resolveStream(options?.stream, dst.device, 'copyPeer()');
  const sd = stream.device.ordinal;
  if (sd !== dst.device.ordinal && sd !== src.device.ordinal) {
    throw new InvalidArgumentError(
      `copyPeer() from device ${src.device.ordinal} to device ${dst.device.ordinal} needs a stream of one of them but the stream belongs to device ${sd}.`,
      { streamDevice: sd, srcDevice: src.device.ordinal, dstDevice: dst.device.ordinal },
    );
  }
  checkCopy('copyPeer', dst, src);
  stream.native.copyPeer(dst.buffer[BUFFER_HANDLE], dst.byteOffset, src.buffer[BUFFER_HANDLE], src.byteOffset, src.nbytes, 0);
}

function checkCopy(fn: string, dst: Tensor, src: Tensor): void {
  if (dst.dtype !== src.dtype || dst.numel !== src.numel) {
    throw new InvalidArgumentError(
      `${fn}() expects the same dtype and numel but dst is ${dst.dtype}[${dst.shape.join(', ')}] and src is ${src.dtype}[${src.shape.join(', ')}].`,
      { op: fn },
    );
  }
}
