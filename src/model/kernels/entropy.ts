/**
 * Token log-probs and the exact per-token entropy of the softmax over the vocabulary in
 * one kernel, and its backward (native/kernels/model/softmax_entropy.cc): GRPO's entropy
 * bonus. The log-prob half equals tokenLogprobs() bit for bit on the fast path.
 */
import type { Tensor } from '../../runtime/device/tensor.js';
import { BUFFER_HANDLE } from '../../runtime/native.js';
import { enqueue, intArg, numberArg, placement, shapeArg, tensorArg, withOutputs } from './common.js';
import { IGNORE_INDEX, type CrossEntropyOptions } from './loss.js';

const KEYS = ['ignoreIndex', 'temperature'];

export interface LogprobsEntropyResult {
  /** [2, T]: row 0 log p(target) per token, row 1 H_t = −Σ_v p_v log p_v (both 0 where the target is ignoreIndex). */
  out: Tensor;
  /** [T]: logsumexp per row, for the backward. */
  lse: Tensor;
}

function args(fn: string, logits: Tensor, targets: Tensor, options?: CrossEntropyOptions) {
  tensorArg(fn, logits, 'logits', 'fp32');
  tensorArg(fn, targets, 'targets', 'int32');
  const [T, V] = shapeArg(fn, logits, 'logits', [null, null], 'T, V') as [number, number];
  intArg(fn, V, 'V (logits.shape[1])', 1);
  shapeArg(fn, targets, 'targets', [T], 'T');
  const ignore = options?.ignoreIndex === undefined ? IGNORE_INDEX : intArg(fn, options.ignoreIndex, 'ignoreIndex', -(2 ** 31));
  const scale = options?.temperature === undefined ? 1 : 1 / numberArg(fn, options.temperature, 'temperature', (t) => t > 0, '> 0');
  return { T, V, ignore, scale };
}

/** log softmax(logits / temperature)[t, target] and the entropy of softmax(logits / temperature)[t], per token. */
export function tokenLogprobsEntropy(logits: Tensor, targets: Tensor, options?: CrossEntropyOptions): LogprobsEntropyResult {
  const fn = 'tokenLogprobsEntropy';
  const { T, V, ignore, scale } = args(fn, logits, targets, options);
  const p = placement(fn, { logits, targets }, options, KEYS);
  return withOutputs(p.device, { out: [[2, T], 'fp32'], lse: [[T], 'fp32'] }, ({ out, lse }) =>
    enqueue(
      p,
      'tokenLogprobsEntropy',
      T,
      V,
      ignore,
      scale,
      logits.buffer[BUFFER_HANDLE],
      logits.byteOffset,
      targets.buffer[BUFFER_HANDLE],
      targets.byteOffset,
      out.buffer[BUFFER_HANDLE],
      0,
      lse.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

/**
 * dLogits [T, V] from dOut [2, T] (d/dlogp ‖ d/dH): with z = logits / temperature,
 * dOut[0,t]·(onehot − p)/temperature − dOut[1,t]·p·(log p + H_t)/temperature; 0 on ignored rows.
 * `out` and `lse` are the forward's.
 */
export function tokenLogprobsEntropyBackward(dOut: Tensor, logits: Tensor, targets: Tensor, r: LogprobsEntropyResult, options?: CrossEntropyOptions): Tensor {
  const fn = 'tokenLogprobsEntropyBackward';
  const { T, V, ignore, scale } = args(fn, logits, targets, options);
  tensorArg(fn, dOut, 'dOut', 'fp32');
  tensorArg(fn, r.out, 'out', 'fp32');
  tensorArg(fn, r.lse, 'lse', 'fp32');
  shapeArg(fn, dOut, 'dOut', [2, T], '2, T');
  shapeArg(fn, r.out, 'out', [2, T], '2, T');
  shapeArg(fn, r.lse, 'lse', [T], 'T');
  const p = placement(fn, { dOut, logits, targets, lse: r.lse, out: r.out }, options, KEYS);
  return withOutputs(p.device, { dLogits: [[T, V], 'fp32'] }, ({ dLogits }) =>
    enqueue(
      p,
      'tokenLogprobsEntropyBackward',
      T,
      V,
      ignore,
      scale,
      dOut.buffer[BUFFER_HANDLE],
      dOut.byteOffset,
      logits.buffer[BUFFER_HANDLE],
      logits.byteOffset,
      targets.buffer[BUFFER_HANDLE],
      targets.byteOffset,
      r.lse.buffer[BUFFER_HANDLE],
      r.lse.byteOffset,
      r.out.buffer[BUFFER_HANDLE],
      r.out.byteOffset,
      dLogits.buffer[BUFFER_HANDLE],
      0,
    ),
  ).dLogits;
}
