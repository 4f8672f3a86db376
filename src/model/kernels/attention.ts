/** Causal grouped-query attention: forward, backward, KV-cache decode (native/kernels/model/attention.cc). */
import type { Tensor } from '../../runtime/device/tensor.js';
import { BUFFER_HANDLE } from '../../runtime/native.js';
import { enqueue, fail, placement, shapeArg, tensorArg, withOutputs, type KernelOptions } from './common.js';

function dims(fn: string, q: Tensor, k: Tensor): { B: number; S: number; nH: number; nKV: number; D: number } {
  if (q.shape.length !== 4) fail(fn, `expects q of shape [B, S, nH, D] but received [${q.shape.join(', ')}].`);
  const [B, S, nH, D] = q.shape as [number, number, number, number];
  if (k.shape.length !== 4) fail(fn, `expects k of shape [B, S, nKV, D] but received [${k.shape.join(', ')}].`);
  const nKV = k.shape[2]!;
  if (nH === 0 || D === 0 || nKV === 0 || nH % nKV !== 0) {
    fail(fn, `query heads (${nH}) must be a positive multiple of kv heads (${nKV}) and D (${D}) positive.`, { nH, nKV, D });
  }
  return { B, S, nH, nKV, D };
}

export interface AttentionResult {
  /** [B, S, nH, D] */
  o: Tensor;
  /** log-sum-exp of the scaled scores per query, [B, nH, S] (saved for the backward). */
  lse: Tensor;
}

/**
 * o = softmax(q k^T / sqrt(D), causal) v per head; query head h uses kv head
 * h / (nH / nKV). q [B, S, nH, D], k and v [B, S, nKV, D], fp32.
 */
export function attention(q: Tensor, k: Tensor, v: Tensor, options?: KernelOptions): AttentionResult {
  const fn = 'attention';
  for (const [n, t] of [
    ['q', q],
    ['k', k],
    ['v', v],
  ] as const)
    tensorArg(fn, t, n, 'fp32');
  const p = placement(fn, { q, k, v }, options);
  const { B, S, nH, nKV, D } = dims(fn, q, k);
  shapeArg(fn, k, 'k', [B, S, nKV, D], 'B, S, nKV, D');
  shapeArg(fn, v, 'v', [B, S, nKV, D], 'B, S, nKV, D');
  return withOutputs(p.device, { o: [q.shape, 'fp32'], lse: [[B, nH, S], 'fp32'] }, ({ o, lse }) =>
    enqueue(
      p,
      'attention',
      B,
      S,
      nH,
      nKV,
      D,
      q.buffer[BUFFER_HANDLE],
      q.byteOffset,
      k.buffer[BUFFER_HANDLE],
      k.byteOffset,
      v.buffer[BUFFER_HANDLE],
      v.byteOffset,
      o.buffer[BUFFER_HANDLE],
      0,
      lse.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

export interface AttentionGrads {
  dq: Tensor;
  /** Summed over the query heads of each kv group. */
  dk: Tensor;
  dv: Tensor;
}

/** Gradients of attention() from its saved o and lse. */
export function attentionBackward(dO: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, options?: KernelOptions): AttentionGrads {
  const fn = 'attentionBackward';
  for (const [n, t] of [
    ['dO', dO],
    ['q', q],
    ['k', k],
    ['v', v],
    ['o', o],
    ['lse', lse],
  ] as const)
    tensorArg(fn, t, n, 'fp32');
  const p = placement(fn, { dO, q, k, v, o, lse }, options);
  const { B, S, nH, nKV, D } = dims(fn, q, k);
  shapeArg(fn, k, 'k', [B, S, nKV, D], 'B, S, nKV, D');
  shapeArg(fn, v, 'v', [B, S, nKV, D], 'B, S, nKV, D');
  shapeArg(fn, dO, 'dO', [B, S, nH, D], 'B, S, nH, D');
  shapeArg(fn, o, 'o', [B, S, nH, D], 'B, S, nH, D');
  shapeArg(fn, lse, 'lse', [B, nH, S], 'B, nH, S');
  return withOutputs(p.device, { dq: [q.shape, 'fp32'], dk: [k.shape, 'fp32'], dv: [v.shape, 'fp32'] }, ({ dq, dk, dv }) =>
    enqueue(
      p,
      'attentionBackward',
      B,
      S,
      nH,
      nKV,
      D,
      dO.buffer[BUFFER_HANDLE],
      dO.byteOffset,
      q.buffer[BUFFER_HANDLE],
      q.byteOffset,
      k.buffer[BUFFER_HANDLE],
      k.byteOffset,
      v.buffer[BUFFER_HANDLE],
      v.byteOffset,
      o.buffer[BUFFER_HANDLE],
      o.byteOffset,
      lse.buffer[BUFFER_HANDLE],
      lse.byteOffset,
      dq.buffer[BUFFER_HANDLE],
      0,
      dk.buffer[BUFFER_HANDLE],
      0,
      dv.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

/**
 * One decode step: q [B, 1, nH, D] attends to the first lengths[b] positions of
 * kCache / vCache [B, Smax, nKV, D] (lengths int32 [B], read on the device; a
 * length outside [0, Smax] fails the stream; 0 gives o = 0). Returns o [B, 1, nH, D].
 */
export function attentionDecode(q: Tensor, kCache: Tensor, vCache: Tensor, lengths: Tensor, options?: KernelOptions): Tensor {
  const fn = 'attentionDecode';
  for (const [n, t] of [
    ['q', q],
    ['kCache', kCache],
    ['vCache', vCache],
  ] as const)
    tensorArg(fn, t, n, 'fp32');
  tensorArg(fn, lengths, 'lengths', 'int32');
  const p = placement(fn, { q, kCache, vCache, lengths }, options);
  if (q.shape.length !== 4 || q.shape[1] !== 1) fail(fn, `expects q of shape [B, 1, nH, D] but received [${q.shape.join(', ')}].`);
  const [B, , nH, D] = q.shape as [number, number, number, number];
  if (kCache.shape.length !== 4) fail(fn, `expects kCache of shape [B, Smax, nKV, D] but received [${kCache.shape.join(', ')}].`);
  const Smax = kCache.shape[1]!,
    nKV = kCache.shape[2]!;
  if (nH === 0 || D === 0 || nKV === 0 || nH % nKV !== 0) fail(fn, `query heads (${nH}) must be a positive multiple of kv heads (${nKV}).`, { nH, nKV });
  shapeArg(fn, kCache, 'kCache', [B, Smax, nKV, D], 'B, Smax, nKV, D');
  shapeArg(fn, vCache, 'vCache', [B, Smax, nKV, D], 'B, Smax, nKV, D');
  shapeArg(fn, lengths, 'lengths', [B], 'B');
  return withOutputs(p.device, { o: [q.shape, 'fp32'] }, ({ o }) =>
    enqueue(
      p,
      'attentionDecode',
      B,
      Smax,
      nH,
      nKV,
      D,
      q.buffer[BUFFER_HANDLE],
      q.byteOffset,
      kCache.buffer[BUFFER_HANDLE],
      kCache.byteOffset,
      vCache.buffer[BUFFER_HANDLE],
      vCache.byteOffset,
      lengths.buffer[BUFFER_HANDLE],
      lengths.byteOffset,
      o.buffer[BUFFER_HANDLE],
      0,
    ),
  ).o;
}
