/**
 * One dense decoder layer of the rollout engine's decode step as one op
 * (native/kernels/model/decode_layer.cc). It runs the nine kernels the engine enqueued one by one
 * per layer, in the same order on the same inputs, so its outputs are the same bits:
 *   qkv matmul → qkvNormRope (+ KV cache write) → attentionDecode → o_proj matmul → addRmsNorm
 *   → gate_up matmul → swiglu → down matmul → addRmsNorm with the next norm's weight.
 * At the tiny models' sizes an op costs mostly its dispatch, so this is one op per layer and
 * token instead of nine. Fast kernels only, fp32 weights, no tensor parallelism (the engine
 * runs the separate ops otherwise).
 */
import type { Tensor } from '../../runtime/device/tensor.js';
import { BUFFER_HANDLE } from '../../runtime/native.js';
import { enqueue, fail, numberArg, placement, shapeArg, tensorArg, withOutputs, type KernelOptions } from './common.js';
import { tableArg, type RopeTable } from './rope.js';

/** A dense layer's weights in the engine's processed layout, and the norm that follows the layer. */
export interface DecodeLayerWeights {
  /** [(nH + 2·nKV)·D, H]: q, k and v projections stacked. */
  qkv: Tensor;
  /** [D]: per-head q / k RMSNorm weights. */
  qNorm: Tensor;
  kNorm: Tensor;
  /** [H, nH·D] */
  o: Tensor;
  /** [H]: post-attention RMSNorm. */
  postLn: Tensor;
  /** [2·I, H]: gate and up projections stacked. */
  gateUp: Tensor;
  /** [H, I] */
  down: Tensor;
  /** [H]: the next layer's input norm (the final norm after the last layer). */
  nextLn: Tensor;
}

export interface DecodeLayerResult {
  /** [B, H]: the residual stream after the layer. */
  x: Tensor;
  /** [B, H]: x normed by weights.nextLn. */
  h: Tensor;
}

/**
 * x [B, H] is the residual stream, h [B, H] its input-normed rows; positions int32 [B] is each row's
 * new position and KV cache slot, lengths int32 [B] the valid cache length after the write; kCache /
 * vCache [B, Smax, nKV, D] are the layer's cache rows (written at positions).
 */
export function decodeLayer(
  x: Tensor,
  h: Tensor,
  w: DecodeLayerWeights,
  nH: number,
  nKV: number,
  eps: number,
  positions: Tensor,
  lengths: Tensor,
  table: RopeTable,
  cache: { kCache: Tensor; vCache: Tensor },
  options?: KernelOptions,
): DecodeLayerResult {
  const fn = 'decodeLayer';
  const { kCache, vCache } = cache;
  const f32 = { x, h, qkv: w.qkv, qNorm: w.qNorm, kNorm: w.kNorm, o: w.o, postLn: w.postLn, gateUp: w.gateUp, down: w.down, nextLn: w.nextLn, kCache, vCache };
  for (const [name, t] of Object.entries(f32)) tensorArg(fn, t, name, 'fp32');
  tensorArg(fn, positions, 'positions', 'int32');
  tensorArg(fn, lengths, 'lengths', 'int32');
  const p = placement(fn, { ...f32, positions, lengths }, options);
  if (p.impl !== 0) fail(fn, "has only the fast kernels but was asked for impl 'reference'. HINT: run the separate ops for the reference kernels.");
  for (const [name, n] of [
    ['nH', nH],
    ['nKV', nKV],
  ] as const)
    if (!Number.isSafeInteger(n) || n < 1) fail(fn, `expects ${name} to be a positive integer but received ${String(n)}.`);
  if (nH % nKV !== 0) fail(fn, `query heads (${nH}) must be a multiple of kv heads (${nKV}).`, { nH, nKV });
  numberArg(fn, eps, 'eps', (e) => e >= 0, '>= 0');
  if (x.shape.length !== 2) fail(fn, `expects x of shape [B, H] but received [${x.shape.join(', ')}].`);
  const [B, H] = x.shape as [number, number];
  if (H === 0) fail(fn, 'expects rows of H > 0 elements but x has H = 0.');
  shapeArg(fn, h, 'h', [B, H], 'B, H');
  const D = w.qNorm.shape[0]!;
  shapeArg(fn, w.qNorm, 'qNorm', [null], 'D');
  if (D === 0 || D % 2 !== 0) fail(fn, `the head dim D (length of qNorm) must be even and positive but is ${D}.`, { D });
  shapeArg(fn, w.kNorm, 'kNorm', [D], 'D');
  shapeArg(fn, w.qkv, 'qkv', [(nH + 2 * nKV) * D, H], '(nH + 2·nKV)·D, H');
  shapeArg(fn, w.o, 'o', [H, nH * D], 'H, nH·D');
  shapeArg(fn, w.postLn, 'postLn', [H], 'H');
  if (w.down.shape.length !== 2 || w.down.shape[1] === 0) fail(fn, `expects down of shape [H, I] with I > 0 but received [${w.down.shape.join(', ')}].`);
  const I = w.down.shape[1]!;
  shapeArg(fn, w.down, 'down', [H, I], 'H, I');
  shapeArg(fn, w.gateUp, 'gateUp', [2 * I, H], '2·I, H');
  shapeArg(fn, w.nextLn, 'nextLn', [H], 'H');
  shapeArg(fn, positions, 'positions', [B], 'B');
  shapeArg(fn, lengths, 'lengths', [B], 'B');
  if (kCache.shape.length !== 4 || kCache.shape[1] === 0)
    fail(fn, `expects kCache of shape [B, Smax, nKV, D] with Smax > 0 but received [${kCache.shape.join(', ')}].`);
  const Smax = kCache.shape[1]!;
  shapeArg(fn, kCache, 'kCache', [B, Smax, nKV, D], 'B, Smax, nKV, D');
  shapeArg(fn, vCache, 'vCache', [B, Smax, nKV, D], 'B, Smax, nKV, D (as kCache)');
  tableArg(fn, table, D);
  return withOutputs(p.device, { x: [[B, H], 'fp32'], h: [[B, H], 'fp32'] }, (out) =>
    enqueue(
      p,
      'decodeLayer',
      B,
      H,
      nH,
      nKV,
      D,
      I,
      Smax,
      eps,
      table.invFreq,
      table.scale,
      x.buffer[BUFFER_HANDLE],
      x.byteOffset,
      h.buffer[BUFFER_HANDLE],
      h.byteOffset,
      w.qkv.buffer[BUFFER_HANDLE],
      w.qkv.byteOffset,
      w.qNorm.buffer[BUFFER_HANDLE],
      w.qNorm.byteOffset,
      w.kNorm.buffer[BUFFER_HANDLE],
      w.kNorm.byteOffset,
      w.o.buffer[BUFFER_HANDLE],
      w.o.byteOffset,
      w.postLn.buffer[BUFFER_HANDLE],
      w.postLn.byteOffset,
      w.gateUp.buffer[BUFFER_HANDLE],
      w.gateUp.byteOffset,
      w.down.buffer[BUFFER_HANDLE],
      w.down.byteOffset,
      w.nextLn.buffer[BUFFER_HANDLE],
      w.nextLn.byteOffset,
      positions.buffer[BUFFER_HANDLE],
      positions.byteOffset,
      lengths.buffer[BUFFER_HANDLE],
      lengths.byteOffset,
      kCache.buffer[BUFFER_HANDLE],
      kCache.byteOffset,
      vCache.buffer[BUFFER_HANDLE],
      vCache.byteOffset,
      out.x.buffer[BUFFER_HANDLE],
      0,
      out.h.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}
