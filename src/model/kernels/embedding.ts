/** Token embedding lookup and its scatter-add backward (native/kernels/model/embedding.cc). */
import { DTYPE_CODE } from '../../runtime/device/dtype.js';
import { BUFFER_HANDLE } from '../../runtime/native.js';
import type { Tensor } from '../../runtime/device/tensor.js';
import { enqueue, intArg, placement, shapeArg, tensorArg, withOutputs, type KernelOptions } from './common.js';

/**
 * out[..., :] = table[ids[...], :]. ids int32 of any shape, table [V, H] fp32 or bf16;
 * out is [...ids.shape, H] in the table's dtype. An id outside [0, V) is found on the
 * device when the op runs and fails the stream with a StreamError naming the id and
 * its position (no host sync).
 */
export function embedding(ids: Tensor, table: Tensor, options?: KernelOptions): Tensor {
  const fn = 'embedding';
  tensorArg(fn, ids, 'ids', 'int32');
  tensorArg(fn, table, 'table', ['fp32', 'bf16']);
  const p = placement(fn, { ids, table }, options);
  const [V, H] = shapeArg(fn, table, 'table', [null, null], 'V, H') as [number, number];
  const T = ids.numel;
  return withOutputs(p.device, { out: [[...ids.shape, H], table.dtype] }, ({ out }) =>
    enqueue(
      p,
      'embedding',
      DTYPE_CODE[table.dtype],
      T,
      V,
      H,
      ids.buffer[BUFFER_HANDLE],
      ids.byteOffset,
      table.buffer[BUFFER_HANDLE],
      table.byteOffset,
      out.buffer[BUFFER_HANDLE],
      0,
    ),
  ).out;
}

/**
 * dTable [V, H] (fp32) = sum over positions t of dY[t] added into row ids[t] (zero
 * elsewhere). dY is [...ids.shape, H] fp32. Bad ids fail the stream as in embedding().
 */
export function embeddingBackward(dY: Tensor, ids: Tensor, vocabSize: number, options?: KernelOptions): Tensor {
  const fn = 'embeddingBackward';
  tensorArg(fn, dY, 'dY', 'fp32');
  tensorArg(fn, ids, 'ids', 'int32');
  const V = intArg(fn, vocabSize, 'vocabSize', 1);
  const p = placement(fn, { dY, ids }, options);
  const H = dY.shape[dY.shape.length - 1] ?? 0;
  shapeArg(fn, dY, 'dY', [...ids.shape, null], [...ids.shape.map(() => '.'), 'H'].join(', '));
  return withOutputs(p.device, { dTable: [[V, H], 'fp32'] }, ({ dTable }) =>
    enqueue(
      p,
      'embeddingBackward',
      ids.numel,
      V,
      H,
      ids.buffer[BUFFER_HANDLE],
      ids.byteOffset,
      dY.buffer[BUFFER_HANDLE],
      dY.byteOffset,
      dTable.buffer[BUFFER_HANDLE],
      0,
    ),
  ).dTable;
}
