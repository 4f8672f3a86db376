/**
 * MoE experts without host syncs (native/kernels/model/moe.cc). Shapes are static
 * (T * k rows in expert order); per-expert counts and offsets are computed and
 * consumed on the device, never read by the host:
 *
 *   { counts, offsets, order } = moeDispatch(indices, E)
 *   xs  = moeGather(x, order, k)                                   [T*k, H]
 *   gu  = groupedMatmul(xs, gate_up_proj [E, 2I, H], offsets)      [T*k, 2I]
 *   h   = swigluFused(gu)                                          [T*k, I]
 *   ys  = groupedMatmul(h, down_proj [E, H, I], offsets)           [T*k, H]
 *   y   = moeCombine(ys, order, weights)                           [T, H]
 */
import { DTYPE_CODE, type DType } from '../../runtime/device/dtype.js';
import { BUFFER_HANDLE } from '../../runtime/native.js';
import { checkDType } from '../../runtime/device/dtype.js';
import type { Tensor } from '../../runtime/device/tensor.js';
import { boolArg, enqueue, fail, intArg, placement, shapeArg, tensorArg, withOutputs, type KernelOptions } from './common.js';

export interface MoeDispatchResult {
  /** [E] int32: slots routed to each expert. */
  counts: Tensor;
  /** [E + 1] int32: exclusive prefix sum of counts (offsets[E] = T * k). */
  offsets: Tensor;
  /** [T * k] int32: slot ids s = t * k + j sorted by expert, stable (ascending s within an expert). */
  order: Tensor;
}

/** Counting sort of the routing slots by expert, on the device. indices [T, k] int32; an id outside [0, E) fails the stream. */
export function moeDispatch(indices: Tensor, numExperts: number, options?: KernelOptions): MoeDispatchResult {
  const fn = 'moeDispatch';
  tensorArg(fn, indices, 'indices', 'int32');
  const E = intArg(fn, numExperts, 'numExperts', 1);
  const p = placement(fn, { indices }, options);
  shapeArg(fn, indices, 'indices', [null, null], 'T, k');
  const slots = indices.numel;
  return withOutputs(p.device, { counts: [[E], 'int32'], offsets: [[E + 1], 'int32'], order: [[slots], 'int32'] }, ({ counts, offsets, order }) =>
    enqueue(
      p,
      'moeDispatch',
      slots,
      E,
      indices.buffer[BUFFER_HANDLE],
      indices.byteOffset,
      counts.buffer[BUFFER_HANDLE],
      0,
      offsets.buffer[BUFFER_HANDLE],
      0,
      order.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

function orderDims(fn: string, order: Tensor, k: number, T: number): void {
  intArg(fn, k, 'k', 1);
  shapeArg(fn, order, 'order', [T * k], 'T * k');
}

/** xs[r] = x[order[r] / k]: token rows in expert order. x [T, H] fp32 -> xs [T * k, H]. */
export function moeGather(x: Tensor, order: Tensor, k: number, options?: KernelOptions): Tensor {
  const fn = 'moeGather';
  tensorArg(fn, x, 'x', 'fp32');
  tensorArg(fn, order, 'order', 'int32');
  const p = placement(fn, { x, order }, options);
  const [T, H] = shapeArg(fn, x, 'x', [null, null], 'T, H') as [number, number];
  orderDims(fn, order, k, T);
  return withOutputs(p.device, { xs: [[T * k, H], 'fp32'] }, ({ xs }) =>
    enqueue(p, 'moeGather', T, k, H, x.buffer[BUFFER_HANDLE], x.byteOffset, order.buffer[BUFFER_HANDLE], order.byteOffset, xs.buffer[BUFFER_HANDLE], 0),
  ).xs;
}

/** Backward of moeGather: dX [T, H] = sum of the k rows of dXs [T * k, H] holding each token. */
export function moeGatherBackward(dXs: Tensor, order: Tensor, k: number, options?: KernelOptions): Tensor {
  const fn = 'moeGatherBackward';
  tensorArg(fn, dXs, 'dXs', 'fp32');
  tensorArg(fn, order, 'order', 'int32');
  const p = placement(fn, { dXs, order }, options);
  intArg(fn, k, 'k', 1);
  const [N, H] = shapeArg(fn, dXs, 'dXs', [null, null], 'T * k, H') as [number, number];
  if (N % k !== 0) fail(fn, `dXs has ${N} rows, not a multiple of k = ${k}.`);
  const T = N / k;
  orderDims(fn, order, k, T);
  return withOutputs(p.device, { dX: [[T, H], 'fp32'] }, ({ dX }) =>
    enqueue(
      p,
      'moeGatherBackward',
      T,
      k,
      H,
      dXs.buffer[BUFFER_HANDLE],
      dXs.byteOffset,
      order.buffer[BUFFER_HANDLE],
      order.byteOffset,
      dX.buffer[BUFFER_HANDLE],
      0,
    ),
  ).dX;
}

/** y[t] = sum_j weights[t, j] * ys[row of slot t*k + j]. ys [T * k, H], weights [T, k] -> y [T, H]. */
export function moeCombine(ys: Tensor, order: Tensor, weights: Tensor, options?: KernelOptions): Tensor {
  const fn = 'moeCombine';
  tensorArg(fn, ys, 'ys', 'fp32');
  tensorArg(fn, order, 'order', 'int32');
  tensorArg(fn, weights, 'weights', 'fp32');
  const p = placement(fn, { ys, order, weights }, options);
  const [T, k] = shapeArg(fn, weights, 'weights', [null, null], 'T, k') as [number, number];
  if (k === 0) fail(fn, 'weights must have k >= 1 columns.');
  const [, H] = shapeArg(fn, ys, 'ys', [T * k, null], 'T * k, H') as [number, number];
  orderDims(fn, order, k, T);
  return withOutputs(p.device, { y: [[T, H], 'fp32'] }, ({ y }) =>
    enqueue(
      p,
      'moeCombine',
      T,
      k,
      H,
      ys.buffer[BUFFER_HANDLE],
      ys.byteOffset,
      order.buffer[BUFFER_HANDLE],
      order.byteOffset,
      weights.buffer[BUFFER_HANDLE],
      weights.byteOffset,
      y.buffer[BUFFER_HANDLE],
      0,
    ),
  ).y;
}

export interface MoeCombineGrads {
  /** [T * k, H] */
  dYs: Tensor;
  /** [T, k] */
  dWeights: Tensor;
}

export function moeCombineBackward(dY: Tensor, ys: Tensor, order: Tensor, weights: Tensor, options?: KernelOptions): MoeCombineGrads {
  const fn = 'moeCombineBackward';
  for (const [n, t] of [
    ['dY', dY],
    ['ys', ys],
    ['weights', weights],
  ] as const)
    tensorArg(fn, t, n, 'fp32');
  tensorArg(fn, order, 'order', 'int32');
  const p = placement(fn, { dY, ys, order, weights }, options);
  const [T, k] = shapeArg(fn, weights, 'weights', [null, null], 'T, k') as [number, number];
  if (k === 0) fail(fn, 'weights must have k >= 1 columns.');
  const [, H] = shapeArg(fn, ys, 'ys', [T * k, null], 'T * k, H') as [number, number];
  shapeArg(fn, dY, 'dY', [T, H], 'T, H');
  orderDims(fn, order, k, T);
  return withOutputs(p.device, { dYs: [[T * k, H], 'fp32'], dWeights: [[T, k], 'fp32'] }, ({ dYs, dWeights }) =>
    enqueue(
      p,
      'moeCombineBackward',
      T,
      k,
      H,
      dY.buffer[BUFFER_HANDLE],
      dY.byteOffset,
      ys.buffer[BUFFER_HANDLE],
      ys.byteOffset,
      order.buffer[BUFFER_HANDLE],
      order.byteOffset,
      weights.buffer[BUFFER_HANDLE],
      weights.byteOffset,
      dYs.buffer[BUFFER_HANDLE],
      0,
      dWeights.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

export interface GroupedMatmulOptions extends KernelOptions {
  /**
   * true (default): w is [E, M, K] and y = x . w[e]^T (HF `gate_up_proj` [E, 2I, H],
   * `down_proj` [E, H, I]); false: w is [E, K, M] and y = x . w[e] (the rollout
   * engine's processed `w13_weight` [E, H, 2I] / `w2_weight` [E, I, H]).
   */
  transB?: boolean;
  /** fp32 (default) or bf16; accumulation is always fp32. */
  outDtype?: DType;
}

function groupedDims(fn: string, x: Tensor, w: Tensor, offsets: Tensor, transB: boolean): { N: number; K: number; M: number; E: number } {
  const [N, K] = shapeArg(fn, x, 'x', [null, null], 'N, K') as [number, number];
  if (w.shape.length !== 3) fail(fn, `expects w of shape [E, M, K] (transB) or [E, K, M] but received [${w.shape.join(', ')}].`);
  const E = w.shape[0]!;
  if (E === 0) fail(fn, 'w has no experts (E = 0).');
  const M = transB ? w.shape[1]! : w.shape[2]!;
  shapeArg(fn, w, 'w', transB ? [E, M, K] : [E, K, M], transB ? 'E, M, K = x cols' : 'E, K = x cols, M');
  shapeArg(fn, offsets, 'offsets', [E + 1], 'E + 1');
  return { N, K, M, E };
}

/**
 * Rows offsets[e]..offsets[e+1] of x [N, K] are multiplied by expert e's weight.
 * x and w share one dtype (fp32 or bf16). offsets [E + 1] int32 stay on the device
 * (checked when the op runs: rising from 0 to N). Returns y [N, M].
 */
export function groupedMatmul(x: Tensor, w: Tensor, offsets: Tensor, options?: GroupedMatmulOptions): Tensor {
  const fn = 'groupedMatmul';
  tensorArg(fn, x, 'x', ['fp32', 'bf16']);
  tensorArg(fn, w, 'w', x.dtype);
  tensorArg(fn, offsets, 'offsets', 'int32');
  const p = placement(fn, { x, w, offsets }, options, ['transB', 'outDtype']);
  const transB = options?.transB === undefined ? true : boolArg(fn, options.transB, 'transB');
  const outDtype = options?.outDtype === undefined ? 'fp32' : checkDType(options.outDtype, 'outDtype');
  if (outDtype !== 'fp32' && outDtype !== 'bf16') fail(fn, `outDtype must be fp32 or bf16 but received ${outDtype}.`);
  const { N, K, M, E } = groupedDims(fn, x, w, offsets, transB);
  return withOutputs(p.device, { y: [[N, M], outDtype] }, ({ y }) =>
    enqueue(
      p,
      'groupedMatmul',
      DTYPE_CODE[x.dtype],
      DTYPE_CODE[outDtype],
      N,
      K,
      M,
      E,
      transB,
      x.buffer[BUFFER_HANDLE],
      x.byteOffset,
      w.buffer[BUFFER_HANDLE],
      w.byteOffset,
      offsets.buffer[BUFFER_HANDLE],
      offsets.byteOffset,
      y.buffer[BUFFER_HANDLE],
      0,
    ),
  ).y;
}

export interface GroupedMatmulBackwardOptions extends KernelOptions {
  /** As in the forward (default true). */
  transB?: boolean;
  /** Compute dX (default true). */
  dX?: boolean;
  /** Compute dW (default true). */
  dW?: boolean;
}

export interface GroupedMatmulGrads {
  /** [N, K] fp32 (undefined when not requested). */
  dX?: Tensor;
  /** fp32 in w's layout; zero for experts without rows (undefined when not requested). */
  dW?: Tensor;
}

/** Gradients of groupedMatmul: dY [N, M] shares x's and w's dtype. */
export function groupedMatmulBackward(dY: Tensor, x: Tensor, w: Tensor, offsets: Tensor, options?: GroupedMatmulBackwardOptions): GroupedMatmulGrads {
  const fn = 'groupedMatmulBackward';
  tensorArg(fn, x, 'x', ['fp32', 'bf16']);
  tensorArg(fn, w, 'w', x.dtype);
  tensorArg(fn, dY, 'dY', x.dtype);
  tensorArg(fn, offsets, 'offsets', 'int32');
  const p = placement(fn, { dY, x, w, offsets }, options, ['transB', 'dX', 'dW']);
  const transB = options?.transB === undefined ? true : boolArg(fn, options.transB, 'transB');
  const wantDX = options?.dX === undefined ? true : boolArg(fn, options.dX, 'dX');
  const wantDW = options?.dW === undefined ? true : boolArg(fn, options.dW, 'dW');
  const { N, K, M, E } = groupedDims(fn, x, w, offsets, transB);
  shapeArg(fn, dY, 'dY', [N, M], 'N, M');
  const specs: Record<string, [number[], DType]> = {};
  if (wantDX) specs.dX = [[N, K], 'fp32'];
  if (wantDW) specs.dW = [[...w.shape], 'fp32'];
  const out = withOutputs(p.device, specs, (o: Record<string, Tensor>) =>
    enqueue(
      p,
      'groupedMatmulBackward',
      DTYPE_CODE[x.dtype],
      N,
      K,
      M,
      E,
      transB,
      dY.buffer[BUFFER_HANDLE],
      dY.byteOffset,
      x.buffer[BUFFER_HANDLE],
      x.byteOffset,
      w.buffer[BUFFER_HANDLE],
      w.byteOffset,
      offsets.buffer[BUFFER_HANDLE],
      offsets.byteOffset,
      o.dX?.buffer[BUFFER_HANDLE] ?? null,
      0,
      o.dW?.buffer[BUFFER_HANDLE] ?? null,
      0,
    ),
  );
  return { dX: out.dX, dW: out.dW };
}
