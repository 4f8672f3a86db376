/** Σ x² over a list of fp32 tensors as one op (native/kernels/model/sum_squares.cc). */
import { describe } from '../../runtime/device/dtype.js';
import { InvalidArgumentError } from '../../runtime/errors.js';
import { BUFFER_HANDLE, type NativeBufferHandle, type NativeModelOps } from '../../runtime/native.js';
import type { Tensor } from '../../runtime/device/tensor.js';
import { deviceArg, enqueue, placement, tensorArg, withOutputs, type KernelOptions } from './common.js';

/**
 * Σ over `tensors` of Σ x², as a new [1, 1] fp32 tensor (the caller releases it): the squared
 * norm gradient clipping needs, in ONE stream op. Bitwise what a 1x1 matmul(row, row, transB) per
 * tensor (row = its [1, numel] view) followed by add() of those sums in list order gives: the op
 * runs the matmul kernel itself per tensor. Empty tensors are skipped; at least one must have
 * elements. Each tensor is checked (live, contiguous, fp32, on the stream's device), the message
 * naming it (`tensors[3]`).
 */
export function sumSquares(tensors: readonly Tensor[], options?: KernelOptions): Tensor {
  const fn = 'sumSquares';
  if (!Array.isArray(tensors)) throw new InvalidArgumentError(`${fn}() expects an array of tensors but received ${describe(tensors)}.`, { op: fn });
  let first = -1;
  for (let i = 0; i < tensors.length; i++) {
    const t = tensorArg(fn, tensors[i], `tensors[${i}]`, 'fp32');
    if (first < 0 && t.numel > 0) first = i;
  }
  if (first < 0) {
    throw new InvalidArgumentError(`${fn}() needs at least one tensor with elements but received ${tensors.length} tensors, all empty or none.`, {
      op: fn,
    });
  }
  const p = placement(fn, { [`tensors[${first}]`]: tensors[first]! }, options);
  for (let i = 0; i < tensors.length; i++) deviceArg(fn, tensors[i]!, `tensors[${i}]`, p.stream);
  const args: Array<number | NativeBufferHandle> = [tensors.length];
  return withOutputs(p.device, { out: [[1, 1], 'fp32'] }, ({ out }) => {
    args.push(out.buffer[BUFFER_HANDLE], out.byteOffset);
    for (const t of tensors) args.push(t.numel, t.buffer[BUFFER_HANDLE], t.byteOffset);
    enqueue(p, 'sumSquares', ...(args as NativeModelOps['sumSquares']));
  }).out;
}
