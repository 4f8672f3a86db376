/** AdamW optimizer step, in place (native/kernels/model/adamw.cc). */
import { InvalidArgumentError } from '../../runtime/errors.js';
import type { Tensor } from '../../runtime/device/tensor.js';
import { enqueue, intArg, numberArg, placement, shapeArg, tensorArg, type KernelOptions } from './common.js';

export interface AdamWOptions extends KernelOptions {
  lr: number;
  /** Default 0.9. */
  beta1?: number;
  /** Default 0.999. */
  beta2?: number;
  /** Default 1e-8. */
  eps?: number;
  /** Decoupled weight decay (default 0.01, as torch.optim.AdamW). */
  weightDecay?: number;
  /** 1-based step count for bias correction. */
  step: number;
}

/**
 * torch.optim.AdamW step on fp32 param / grad / m / v of one shape, in place:
 * p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 * p -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps).
 */
export function adamw(param: Tensor, grad: Tensor, m: Tensor, v: Tensor, options: AdamWOptions): void {
  const fn = 'adamw';
  for (const [n, t] of [
    ['param', param],
    ['grad', grad],
    ['m', m],
    ['v', v],
  ] as const)
    tensorArg(fn, t, n, 'fp32');
  if (options === undefined || typeof options !== 'object') throw new InvalidArgumentError('adamw() requires options { lr, step, ... }.', { op: fn });
  const p = placement(fn, { param, grad, m, v }, options, ['lr', 'beta1', 'beta2', 'eps', 'weightDecay', 'step']);
  const lr = numberArg(fn, options.lr, 'lr', (x) => x >= 0, '>= 0');
  const b1 = numberArg(fn, options.beta1 ?? 0.9, 'beta1', (x) => x >= 0 && x < 1, 'in [0, 1)');
  const b2 = numberArg(fn, options.beta2 ?? 0.999, 'beta2', (x) => x >= 0 && x < 1, 'in [0, 1)');
  const eps = numberArg(fn, options.eps ?? 1e-8, 'eps', (x) => x >= 0, '>= 0');
  const wd = numberArg(fn, options.weightDecay ?? 0.01, 'weightDecay', (x) => x >= 0, '>= 0');
  const step = intArg(fn, options.step, 'step', 1);
  for (const [n, t] of [
    ['grad', grad],
    ['m', m],
    ['v', v],
  ] as const)
    shapeArg(fn, t, n, param.shape, 'shape of param');
  enqueue(
    p,
    'adamw',
    param.numel,
    lr,
    b1,
    b2,
    eps,
    wd,
    step,
    param.buffer,
    param.byteOffset,
    grad.buffer,
    grad.byteOffset,
    m.buffer,
    m.byteOffset,
    v.buffer,
    v.byteOffset,
  );
}
