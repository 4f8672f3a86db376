/** Log-softmax, cross-entropy, token log-probs and their backward (native/kernels/model/softmax_ce.cc). */
import { scale as scaleOp } from '../../runtime/device/ops.js';
import { BUFFER_HANDLE } from '../../runtime/native.js';
import type { Tensor } from '../../runtime/device/tensor.js';
import { enqueue, intArg, numberArg, placement, shapeArg, tensorArg, withOutputs, type KernelOptions } from './common.js';

export const IGNORE_INDEX = -100;

export interface CrossEntropyOptions extends KernelOptions {
  /** Target value whose row gives loss 0 and gradient 0 (default -100, as torch). */
  ignoreIndex?: number;
  /**
   * The logits are divided by this first (default 1), without materialising the
   * scaled [T, V] tensor: log-probs under the sampling temperature, as GRPO needs.
   * Pass the same value to the backward.
   */
  temperature?: number;
}

const CE_KEYS = ['ignoreIndex', 'temperature'];

function ignoreOf(fn: string, options?: CrossEntropyOptions): number {
  return options?.ignoreIndex === undefined ? IGNORE_INDEX : intArg(fn, options.ignoreIndex, 'ignoreIndex', -(2 ** 31));
}

function scaleOf(fn: string, options?: CrossEntropyOptions): number {
  return options?.temperature === undefined ? 1 : 1 / numberArg(fn, options.temperature, 'temperature', (t) => t > 0, '> 0');
}

/** log softmax over the last dim of logits [T, V] fp32. */
export function logSoftmax(logits: Tensor, options?: KernelOptions): Tensor {
  const fn = 'logSoftmax';
  tensorArg(fn, logits, 'logits', 'fp32');
  const p = placement(fn, { logits }, options);
  const [T, V] = shapeArg(fn, logits, 'logits', [null, null], 'T, V') as [number, number];
  intArg(fn, V, 'V (logits.shape[1])', 1);
  return withOutputs(p.device, { out: [[T, V], 'fp32'] }, ({ out }) =>
    enqueue(p, 'logSoftmax', T, V, logits.buffer[BUFFER_HANDLE], logits.byteOffset, out.buffer[BUFFER_HANDLE], 0),
  ).out;
}

export interface CrossEntropyResult {
  /** [T]: lse - logits[t, target] (0 where target == ignoreIndex). Not reduced. */
  loss: Tensor;
  /** [T]: logsumexp of each row (saved for the backward). */
  lse: Tensor;
}

function ce(fn: string, mode: number, logits: Tensor, targets: Tensor, options?: CrossEntropyOptions): CrossEntropyResult {
  tensorArg(fn, logits, 'logits', 'fp32');
  tensorArg(fn, targets, 'targets', 'int32');
  const p = placement(fn, { logits, targets }, options, CE_KEYS);
  const ignore = ignoreOf(fn, options);
  const scale = scaleOf(fn, options);
  const [T, V] = shapeArg(fn, logits, 'logits', [null, null], 'T, V') as [number, number];
  intArg(fn, V, 'V (logits.shape[1])', 1);
  shapeArg(fn, targets, 'targets', [T], 'T');
  return withOutputs(p.device, { loss: [[T], 'fp32'], lse: [[T], 'fp32'] }, ({ loss, lse }) =>
    enqueue(
      p,
      'crossEntropy',
      mode,
      T,
      V,
      ignore,
      scale,
      logits.buffer[BUFFER_HANDLE],
      logits.byteOffset,
      targets.buffer[BUFFER_HANDLE],
      targets.byteOffset,
      loss.buffer[BUFFER_HANDLE],
      0,
      lse.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

/**
 * Per-token cross-entropy of logits [T, V] against targets int32 [T]. A target that
 * is neither in [0, V) nor ignoreIndex fails the stream when the op runs.
 */
export function crossEntropy(logits: Tensor, targets: Tensor, options?: CrossEntropyOptions): CrossEntropyResult {
  return ce('crossEntropy', 0, logits, targets, options);
}

/** dLogits [T, V] = dLoss[t] / temperature * (softmax(logits[t] / temperature) - onehot(target)); 0 on ignored rows. */
export function crossEntropyBackward(dLoss: Tensor, logits: Tensor, targets: Tensor, lse: Tensor, options?: CrossEntropyOptions): Tensor {
  const fn = 'crossEntropyBackward';
  tensorArg(fn, dLoss, 'dLoss', 'fp32');
  tensorArg(fn, logits, 'logits', 'fp32');
  tensorArg(fn, targets, 'targets', 'int32');
  tensorArg(fn, lse, 'lse', 'fp32');
  const p = placement(fn, { dLoss, logits, targets, lse }, options, CE_KEYS);
  const ignore = ignoreOf(fn, options);
  const scale = scaleOf(fn, options);
  const [T, V] = shapeArg(fn, logits, 'logits', [null, null], 'T, V') as [number, number];
  intArg(fn, V, 'V (logits.shape[1])', 1);
  shapeArg(fn, targets, 'targets', [T], 'T');
  shapeArg(fn, dLoss, 'dLoss', [T], 'T');
  shapeArg(fn, lse, 'lse', [T], 'T');
  return withOutputs(p.device, { dLogits: [[T, V], 'fp32'] }, ({ dLogits }) =>
    enqueue(
      p,
      'crossEntropyBackward',
      T,
      V,
      ignore,
      scale,
      dLoss.buffer[BUFFER_HANDLE],
      dLoss.byteOffset,
      logits.buffer[BUFFER_HANDLE],
      logits.byteOffset,
      targets.buffer[BUFFER_HANDLE],
      targets.byteOffset,
      lse.buffer[BUFFER_HANDLE],
      lse.byteOffset,
      dLogits.buffer[BUFFER_HANDLE],
      0,
    ),
  ).dLogits;
}

export interface TokenLogprobsResult {
  /** [T]: log p(target) (0 where target == ignoreIndex). */
  logprobs: Tensor;
  /** [T]: logsumexp per row, for tokenLogprobsBackward. */
  lse: Tensor;
}

/** log softmax(logits)[t, targets[t]] per token, [T] (GRPO's per-token log-probs). */
export function tokenLogprobs(logits: Tensor, targets: Tensor, options?: CrossEntropyOptions): Tensor {
  const r = ce('tokenLogprobs', 1, logits, targets, options);
  r.lse.release();
  return r.loss;
}

/** tokenLogprobs() that also returns the lse its backward needs. */
export function tokenLogprobsWithLse(logits: Tensor, targets: Tensor, options?: CrossEntropyOptions): TokenLogprobsResult {
  const r = ce('tokenLogprobs', 1, logits, targets, options);
  return { logprobs: r.loss, lse: r.lse };
}

/** dLogits = dLogp[t] * (onehot(target) - softmax(logits[t])): crossEntropyBackward of -dLogp. */
export function tokenLogprobsBackward(dLogp: Tensor, logits: Tensor, targets: Tensor, lse: Tensor, options?: CrossEntropyOptions): Tensor {
  tensorArg('tokenLogprobsBackward', dLogp, 'dLogp', 'fp32');
  const neg = scaleOp(dLogp, -1, options?.stream ? { stream: options.stream } : undefined);
  try {
    return crossEntropyBackward(neg, logits, targets, lse, options);
  } finally {
    neg.release();
  }
}
