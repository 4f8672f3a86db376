/** MoE router: softmax, top-k, optional renormalisation, and backward (native/kernels/model/router.cc). */
import type { Tensor } from '../../runtime/device/tensor.js';
import { BUFFER_HANDLE } from '../../runtime/native.js';
import { boolArg, enqueue, fail, intArg, placement, shapeArg, tensorArg, withOutputs, type KernelOptions } from './common.js';

export interface RouterResult {
  /** [T, k] fp32: the selected probs (divided by their sum when renorm). */
  weights: Tensor;
  /** [T, k] int32: expert ids, by descending prob; ties -> lower expert index. */
  indices: Tensor;
  /** [T, E] fp32: softmax of the logits (saved for the backward). */
  probs: Tensor;
}

/**
 * Qwen3-MoE routing: probs = softmax(logits) in fp32, top-k experts per token (ties
 * -> lower index), weights = their probs, divided by their sum when `renorm`
 * (config norm_topk_prob). logits [T, E] fp32.
 */
export function routerTopK(logits: Tensor, k: number, renorm: boolean, options?: KernelOptions): RouterResult {
  const fn = 'routerTopK';
  tensorArg(fn, logits, 'logits', 'fp32');
  const p = placement(fn, { logits }, options);
  const [T, E] = shapeArg(fn, logits, 'logits', [null, null], 'T, E') as [number, number];
  intArg(fn, k, 'k', 1);
  boolArg(fn, renorm, 'renorm');
  if (E === 0 || k > E) fail(fn, `k (${k}) must be at most the number of experts E (${E}).`, { k, E });
  return withOutputs(p.device, { weights: [[T, k], 'fp32'], indices: [[T, k], 'int32'], probs: [[T, E], 'fp32'] }, ({ weights, indices, probs }) =>
    enqueue(
      p,
      'router',
      T,
      E,
      k,
      renorm,
      logits.buffer[BUFFER_HANDLE],
      logits.byteOffset,
      probs.buffer[BUFFER_HANDLE],
      0,
      weights.buffer[BUFFER_HANDLE],
      0,
      indices.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

/** dLogits [T, E] from dWeights [T, k] through top-k (+ renorm) and the softmax. */
export function routerBackward(dWeights: Tensor, probs: Tensor, indices: Tensor, renorm: boolean, options?: KernelOptions): Tensor {
  const fn = 'routerBackward';
  tensorArg(fn, dWeights, 'dWeights', 'fp32');
  tensorArg(fn, probs, 'probs', 'fp32');
  tensorArg(fn, indices, 'indices', 'int32');
  boolArg(fn, renorm, 'renorm');
  const p = placement(fn, { dWeights, probs, indices }, options);
  const [T, E] = shapeArg(fn, probs, 'probs', [null, null], 'T, E') as [number, number];
  const [, k] = shapeArg(fn, indices, 'indices', [T, null], 'T, k') as [number, number];
  shapeArg(fn, dWeights, 'dWeights', [T, k], 'T, k');
  if (E === 0 || k === 0 || k > E) fail(fn, `k (${k}) must be in [1, E = ${E}].`, { k, E });
  return withOutputs(p.device, { dLogits: [[T, E], 'fp32'] }, ({ dLogits }) =>
    enqueue(
      p,
      'routerBackward',
      T,
      E,
      k,
      renorm,
      dWeights.buffer[BUFFER_HANDLE],
      dWeights.byteOffset,
      probs.buffer[BUFFER_HANDLE],
      probs.byteOffset,
      indices.buffer[BUFFER_HANDLE],
      indices.byteOffset,
      dLogits.buffer[BUFFER_HANDLE],
      0,
    ),
  ).dLogits;
}
