/** The rollout KV cache's write (native/kernels/model/kv_write.cc). */
import type { Tensor } from '../../runtime/device/tensor.js';
import { BUFFER_HANDLE } from '../../runtime/native.js';
import { enqueue, fail, placement, shapeArg, tensorArg, type KernelOptions } from './common.js';

/**
 * Writes k / v [B, count, nKV, D] into kCache / vCache [B, Smax, nKV, D] (in place) at
 * positions[b] .. positions[b] + count - 1 of row b, for every row at once: one op for both
 * tensors of a layer. positions is int32 [B], read on the device: a position outside
 * [0, Smax - count] fails the stream with a StreamError naming the row, and nothing is
 * written. Shapes, dtypes (fp32) and devices are checked here, before anything is enqueued.
 */
export function kvCacheWrite(kCache: Tensor, vCache: Tensor, k: Tensor, v: Tensor, positions: Tensor, options?: KernelOptions): void {
  const fn = 'kvCacheWrite';
  for (const [n, t] of [
    ['kCache', kCache],
    ['vCache', vCache],
    ['k', k],
    ['v', v],
  ] as const)
    tensorArg(fn, t, n, 'fp32');
  tensorArg(fn, positions, 'positions', 'int32');
  const p = placement(fn, { kCache, vCache, k, v, positions }, options);
  if (kCache.shape.length !== 4)
    fail(
      fn,
      `expects kCache of shape [B, Smax, nKV, D] but received [${kCache.shape.join(', ')}]. HINT: pass a layer's cache rows, e.g. KvCache.views(layer, B).k.`,
      {
        argument: 'kCache',
      },
    );
  const [B, Smax, nKV, D] = kCache.shape as [number, number, number, number];
  shapeArg(fn, vCache, 'vCache', [B, Smax, nKV, D], 'B, Smax, nKV, D (as kCache)');
  if (k.shape.length !== 4) fail(fn, `expects k of shape [B, count, nKV, D] but received [${k.shape.join(', ')}].`, { argument: 'k' });
  const count = k.shape[1]!;
  shapeArg(fn, k, 'k', [B, count, nKV, D], 'B, count, nKV, D (B, nKV, D as kCache)');
  shapeArg(fn, v, 'v', [B, count, nKV, D], 'B, count, nKV, D (as k)');
  shapeArg(fn, positions, 'positions', [B], 'B');
  if (count > Smax)
    fail(fn, `k holds ${count} positions per row but the cache holds ${Smax}. HINT: write at most Smax positions (raise maxSeqLen).`, {
      argument: 'k',
      count,
      Smax,
    });
  enqueue(
    p,
    'kvCacheWrite',
    B,
    count,
    Smax,
    nKV * D,
    k.buffer[BUFFER_HANDLE],
    k.byteOffset,
    v.buffer[BUFFER_HANDLE],
    v.byteOffset,
    positions.buffer[BUFFER_HANDLE],
    positions.byteOffset,
    kCache.buffer[BUFFER_HANDLE],
    kCache.byteOffset,
    vCache.buffer[BUFFER_HANDLE],
    vCache.byteOffset,
  );
}
