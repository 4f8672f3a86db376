/**
 * Device-local helpers of the parallel layer (internal): views into a tensor's
 * memory, a strided read into a contiguous destination (the native permute kernel
 * with offsets), narrow(), and permutes that become free views when only size-1
 * dims move. Every function validates in TS before enqueueing.
 */
import type { DeviceBuffer } from './device.js';
import { dtypeSize } from './dtype.js';
import { InvalidArgumentError } from '../errors.js';
import { copy, permute } from './ops.js';
import type { Stream } from './stream.js';
import { Tensor, numelOf } from './tensor.js';

/** A contiguous view of `shape` starting `elemOffset` elements into `t` (shares t's buffer: release one of them only). */
export function viewOf(t: Tensor, shape: readonly number[], elemOffset = 0): Tensor {
  const n = numelOf(shape);
  if (!t.isContiguous || elemOffset < 0 || elemOffset + n > t.numel) {
    throw new InvalidArgumentError(`viewOf(): a view of [${shape.join(', ')}] at element ${elemOffset} does not fit in ${t}.`);
  }
  return new Tensor(t.device, t.buffer, t.dtype, shape, undefined, t.byteOffset + elemOffset * dtypeSize(t.dtype));
}

/**
 * dst (contiguous, numel = prod(shape)) <- src read with `srcStrides` (elements)
 * from element `srcOffset` of src. One pass over the elements read.
 */
export function stridedRead(dst: Tensor, src: Tensor, shape: readonly number[], srcStrides: readonly number[], srcOffset: number, stream: Stream): void {
  const n = numelOf(shape);
  if (dst.dtype !== src.dtype || dst.device.ordinal !== src.device.ordinal || stream.device.ordinal !== dst.device.ordinal) {
    throw new InvalidArgumentError(`stridedRead(): dst ${dst} and src ${src} must share dtype and the stream's device.`);
  }
  if (!dst.isContiguous || !src.isContiguous || dst.numel !== n || shape.length !== srcStrides.length) {
    throw new InvalidArgumentError(`stridedRead(): dst must be contiguous with ${n} elements and shape/strides of equal rank.`);
  }
  if (n === 0) return;
  const extent = srcOffset + shape.reduce((a, d, i) => a + (d - 1) * srcStrides[i]!, 0) + 1;
  if (srcOffset < 0 || extent > src.numel) {
    throw new InvalidArgumentError(`stridedRead(): the read reaches element ${extent - 1} of ${src}, which has ${src.numel}.`);
  }
  const elem = dtypeSize(src.dtype);
  dst.checkLive('dst');
  src.checkLive('src');
  stream.native.permute(elem, dst.buffer, dst.byteOffset, src.buffer, src.byteOffset + srcOffset * elem, [...shape], [...srcStrides], 0, 0);
}

/** A new contiguous tensor holding elements [start, start + len) of `x` along `dim` (one strided read). */
export function narrow(x: Tensor, dim: number, start: number, len: number, stream: Stream): Tensor {
  const shape = [...x.shape];
  const size = shape[dim]!;
  if (start < 0 || len < 0 || start + len > size) throw new InvalidArgumentError(`narrow(): [${start}, ${start + len}) is outside dim ${dim} of ${x}.`);
  shape[dim] = len;
  const pre = numelOf(x.shape.slice(0, dim));
  const post = numelOf(x.shape.slice(dim + 1));
  const out = Tensor.empty(x.device, shape, x.dtype);
  try {
    stridedRead(out, x, [pre, len, post], [size * post, post, 1], start * post, stream);
  } catch (e) {
    out.release();
    throw e;
  }
  return out;
}

/**
 * x with its dims reordered (out.shape[i] = x.shape[dims[i]]): a view of the same
 * memory when the dims of size > 1 keep their relative order, else a contiguous copy
 * (permute: one full read and write of x).
 */
export function permuteOrView(x: Tensor, dims: readonly number[], stream: Stream): Tensor {
  const shape = dims.map((d) => x.shape[d]!);
  const big = dims.filter((d) => x.shape[d]! > 1);
  if (big.every((d, i) => i === 0 || big[i - 1]! < d)) return viewOf(x, shape);
  return permute(x, dims, { stream });
}

/** inv such that permuting by `dims` then by `inv` is the identity. */
export function inversePermutation(dims: readonly number[]): number[] {
  const inv = new Array<number>(dims.length);
  dims.forEach((d, i) => (inv[d] = i));
  return inv;
}

/** copy() of `count` elements between element offsets of two contiguous tensors. */
export function copyRange(dst: Tensor, dstOffset: number, src: Tensor, srcOffset: number, count: number, stream: Stream): void {
  if (count === 0) return;
  copy(viewOf(dst, [count], dstOffset), viewOf(src, [count], srcOffset), { stream });
}

/**
 * Temporaries of one algorithm step: `keep()` the result, `release()` the rest. Views
 * share their owner's buffer object, so buffers (not tensors) are what is tracked.
 */
export class Temps {
  readonly #buffers = new Set<DeviceBuffer>();
  readonly #borrowed: readonly Tensor[];

  /** `borrowed`: inputs owned by the caller; views of them are never released. */
  constructor(...borrowed: Tensor[]) {
    this.#borrowed = borrowed;
  }

  add<T extends Tensor>(t: T): T {
    if (!this.#borrowed.some((b) => b.buffer === t.buffer)) this.#buffers.add(t.buffer);
    return t;
  }

  empty(like: Tensor, shape: readonly number[]): Tensor {
    return this.add(Tensor.empty(like.device, shape, like.dtype));
  }

  /** Releases every tracked buffer except those of `keep` (pending ops still complete first). */
  releaseExcept(...keep: Tensor[]): void {
    for (const b of this.#buffers) {
      if (!keep.some((k) => k.buffer === b) && !b.released) b.release();
    }
    this.#buffers.clear();
  }
}
