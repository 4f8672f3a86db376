/**
 * Fused kernels of the rollout engine's forward (native/kernels/model/fused_norm.cc): each is
 * the exact composition of the separate kernels it replaces, bit for bit (same per-row code),
 * so the engine cuts stream ops per token without changing a result.
 */
import type { Tensor } from '../../runtime/device/tensor.js';
import { BUFFER_HANDLE, type NativeBufferHandle } from '../../runtime/native.js';
import { enqueue, fail, numberArg, placement, shapeArg, tensorArg, withOutputs, type KernelOptions } from './common.js';
import { tableArg, type RopeTable } from './rope.js';

export interface QkvNormRopeResult {
  /** [T, nH, D]: rope(rmsNorm(q head, qw)). */
  q: Tensor;
  /** [T, nKV, D]: rope(rmsNorm(k head, kw)). */
  k: Tensor;
  /** [T, nKV, D]: the v heads, contiguous. */
  v: Tensor;
}

export interface QkvNormRopeOptions extends KernelOptions {
  /**
   * The rollout KV cache rows to write k and v into, as K.kvCacheWrite(kCache, vCache, k, v, positions)
   * right after this op (same checks and bytes, one op fewer): kCache / vCache [B, Smax, nKV, D] with
   * T = B·count, positions int32 [B].
   */
  cache?: { kCache: Tensor; vCache: Tensor; positions: Tensor };
}

/**
 * The epilogue of one matmul against a whole qkv_proj: qkv [T, (nH + 2·nKV)·D] holds q, k and v
 * heads side by side; returns q and k per-head RMSNormed (qw / kw [D], eps) and rotated by rope at
 * positions [T], and v split off. Equals rope(rmsNorm(...)) on the row views, bitwise. With
 * options.cache it also writes k and v into the KV cache.
 */
export function qkvNormRope(
  qkv: Tensor,
  nH: number,
  nKV: number,
  qw: Tensor,
  kw: Tensor,
  eps: number,
  positions: Tensor,
  table: RopeTable,
  options?: QkvNormRopeOptions,
): QkvNormRopeResult {
  const fn = 'qkvNormRope';
  tensorArg(fn, qkv, 'qkv', 'fp32');
  tensorArg(fn, qw, 'qw', 'fp32');
  tensorArg(fn, kw, 'kw', 'fp32');
  tensorArg(fn, positions, 'positions', 'int32');
  const cache = options?.cache;
  if (cache !== undefined && (typeof cache !== 'object' || cache === null))
    fail(fn, 'expects options.cache to be { kCache, vCache, positions } when given.', { argument: 'cache' });
  if (cache) {
    tensorArg(fn, cache.kCache, 'cache.kCache', 'fp32');
    tensorArg(fn, cache.vCache, 'cache.vCache', 'fp32');
    tensorArg(fn, cache.positions, 'cache.positions', 'int32');
  }
  const onDevice: Record<string, Tensor> = { qkv, qw, kw, positions };
  if (cache) Object.assign(onDevice, { kCache: cache.kCache, vCache: cache.vCache, cachePositions: cache.positions });
  const p = placement(fn, onDevice, options, ['cache']);
  for (const [name, n] of [
    ['nH', nH],
    ['nKV', nKV],
  ] as const)
    if (!Number.isSafeInteger(n) || n < 1) fail(fn, `expects ${name} to be a positive integer but received ${String(n)}.`);
  numberArg(fn, eps, 'eps', (e) => e >= 0, '>= 0');
  if (qkv.shape.length !== 2) fail(fn, `expects qkv of shape [T, (nH + 2·nKV)·D] but received [${qkv.shape.join(', ')}].`);
  const [T, W] = qkv.shape as [number, number];
  const D = qw.shape[0]!;
  shapeArg(fn, qw, 'qw', [null], 'D');
  if (D === 0 || D % 2 !== 0) fail(fn, `the head dim D (length of qw) must be even and positive but is ${D}.`, { D });
  shapeArg(fn, kw, 'kw', [D], 'D');
  if (W !== (nH + 2 * nKV) * D) fail(fn, `expects qkv rows of (nH + 2·nKV)·D = (${nH} + 2·${nKV})·${D} = ${(nH + 2 * nKV) * D} but they hold ${W}.`, { W });
  shapeArg(fn, positions, 'positions', [T], 'T');
  tableArg(fn, table, D);
  let B = 0,
    Smax = 0;
  if (cache) {
    const s = shapeArg(fn, cache.kCache, 'cache.kCache', [null, null, nKV, D], 'B, Smax, nKV, D');
    [B, Smax] = s as [number, number];
    shapeArg(fn, cache.vCache, 'cache.vCache', s, 'B, Smax, nKV, D (as kCache)');
    shapeArg(fn, cache.positions, 'cache.positions', [B], 'B');
    if (B === 0 || T % B !== 0 || T / B > Smax)
      fail(fn, `writes T = ${T} tokens into a cache of B = ${B} rows of Smax = ${Smax}: T must be B·count with 0 < B and count <= Smax.`, { T, B, Smax });
  }
  const nb = (t: Tensor | undefined): [NativeBufferHandle | null, number] => (t ? [t.buffer[BUFFER_HANDLE], t.byteOffset] : [null, 0]);
  return withOutputs(p.device, { q: [[T, nH, D], 'fp32'], k: [[T, nKV, D], 'fp32'], v: [[T, nKV, D], 'fp32'] }, ({ q, k, v }) =>
    enqueue(
      p,
      'qkvNormRope',
      T,
      nH,
      nKV,
      D,
      eps,
      table.invFreq,
      table.scale,
      qkv.buffer[BUFFER_HANDLE],
      qkv.byteOffset,
      qw.buffer[BUFFER_HANDLE],
      qw.byteOffset,
      kw.buffer[BUFFER_HANDLE],
      kw.byteOffset,
      positions.buffer[BUFFER_HANDLE],
      positions.byteOffset,
      q.buffer[BUFFER_HANDLE],
      0,
      k.buffer[BUFFER_HANDLE],
      0,
      v.buffer[BUFFER_HANDLE],
      0,
      B,
      Smax,
      ...nb(cache?.kCache),
      ...nb(cache?.vCache),
      ...nb(cache?.positions),
    ),
  );
}

export interface AddRmsNormResult {
  /** x + d (the new residual), shape of x. */
  sum: Tensor;
  /** rmsNorm(x + d, w).y, shape of x. */
  y: Tensor;
}

/** The residual add and the next RMSNorm in one op: sum = x + d, y = rmsNorm(sum, w, eps).y, bitwise. */
export function addRmsNorm(x: Tensor, d: Tensor, w: Tensor, eps = 1e-6, options?: KernelOptions): AddRmsNormResult {
  const fn = 'addRmsNorm';
  tensorArg(fn, x, 'x', 'fp32');
  tensorArg(fn, d, 'd', 'fp32');
  tensorArg(fn, w, 'w', 'fp32');
  numberArg(fn, eps, 'eps', (e) => e >= 0, '>= 0');
  const p = placement(fn, { x, d, w }, options);
  if (x.shape.length < 1) fail(fn, 'expects x of shape [..., H] but received a scalar.');
  const H = x.shape[x.shape.length - 1]!;
  if (H === 0) fail(fn, 'expects rows of H > 0 elements but x has H = 0.');
  shapeArg(fn, d, 'd', x.shape, 'shape of x');
  shapeArg(fn, w, 'w', [H], 'H');
  const T = x.numel / H;
  return withOutputs(p.device, { sum: [x.shape, 'fp32'], y: [x.shape, 'fp32'] }, ({ sum, y }) =>
    enqueue(
      p,
      'addRmsNorm',
      T,
      H,
      eps,
      x.buffer[BUFFER_HANDLE],
      x.byteOffset,
      d.buffer[BUFFER_HANDLE],
      d.byteOffset,
      w.buffer[BUFFER_HANDLE],
      w.byteOffset,
      sum.buffer[BUFFER_HANDLE],
      0,
      y.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}
