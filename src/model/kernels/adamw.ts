/** AdamW optimizer step, in place (native/kernels/model/adamw.cc): one tensor, or a list as one op. */
import { checkOptions } from '../../runtime/device/device.js';
import { describe } from '../../runtime/device/dtype.js';
import { InvalidArgumentError } from '../../runtime/errors.js';
import { BUFFER_HANDLE, type NativeBufferHandle, type NativeModelOps } from '../../runtime/native.js';
import type { Tensor } from '../../runtime/device/tensor.js';
import { deviceArg, enqueue, intArg, KERNEL_KEYS, numberArg, placement, shapeArg, tensorArg, type KernelOptions } from './common.js';

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

/** One tensor's state for adamwMulti(): the parameter, its gradient and its two moments (fp32, one shape). */
export interface AdamWEntry {
  param: Tensor;
  grad: Tensor;
  m: Tensor;
  v: Tensor;
}

const HYPER_KEYS = ['lr', 'beta1', 'beta2', 'eps', 'weightDecay', 'step'] as const;
const ROLES = ['param', 'grad', 'm', 'v'] as const;

/** The checked hyper-parameters, in the native argument order (lr, beta1, beta2, eps, weightDecay, step). */
function hyper(fn: string, options: AdamWOptions): [number, number, number, number, number, number] {
  return [
    numberArg(fn, options.lr, 'lr', (x) => x >= 0, '>= 0'),
    numberArg(fn, options.beta1 ?? 0.9, 'beta1', (x) => x >= 0 && x < 1, 'in [0, 1)'),
    numberArg(fn, options.beta2 ?? 0.999, 'beta2', (x) => x >= 0 && x < 1, 'in [0, 1)'),
    numberArg(fn, options.eps ?? 1e-8, 'eps', (x) => x >= 0, '>= 0'),
    numberArg(fn, options.weightDecay ?? 0.01, 'weightDecay', (x) => x >= 0, '>= 0'),
    intArg(fn, options.step, 'step', 1),
  ];
}

function requireOptions(fn: string, options: unknown): asserts options is AdamWOptions {
  if (options === undefined || options === null || typeof options !== 'object')
    throw new InvalidArgumentError(`${fn}() requires options { lr, step, ... }.`, { op: fn });
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
  requireOptions(fn, options);
  const p = placement(fn, { param, grad, m, v }, options, HYPER_KEYS);
  const h = hyper(fn, options);
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
    ...h,
    param.buffer[BUFFER_HANDLE],
    param.byteOffset,
    grad.buffer[BUFFER_HANDLE],
    grad.byteOffset,
    m.buffer[BUFFER_HANDLE],
    m.byteOffset,
    v.buffer[BUFFER_HANDLE],
    v.byteOffset,
  );
}

/**
 * adamw() over every entry of `list` with one set of hyper-parameters, as ONE stream op (as
 * torch's foreach / fused AdamW): bitwise one adamw() per entry in list order (each tensor keeps
 * the single kernel's vector body and scalar tail). Every entry is checked as adamw() checks its
 * tensors, the message naming it (`grad[3]`); no tensor written (param, m, v) may share memory
 * with any other tensor of the list. An empty list enqueues nothing.
 */
export function adamwMulti(list: readonly AdamWEntry[], options: AdamWOptions): void {
  const fn = 'adamwMulti';
  if (!Array.isArray(list)) throw new InvalidArgumentError(`${fn}() expects an array of { param, grad, m, v } but received ${describe(list)}.`, { op: fn });
  const args: Array<number | NativeBufferHandle> = [list.length];
  for (let i = 0; i < list.length; i++) {
    const e = list[i] as AdamWEntry | undefined;
    if (e === null || typeof e !== 'object')
      throw new InvalidArgumentError(`${fn}() expects list[${i}] to be { param, grad, m, v } but received ${describe(e)}.`, { op: fn, index: i });
    for (const role of ROLES) tensorArg(fn, e[role], `${role}[${i}]`, 'fp32');
  }
  requireOptions(fn, options);
  if (list.length === 0) {
    checkOptions(options, [...KERNEL_KEYS, ...HYPER_KEYS], `${fn}()`);
    hyper(fn, options);
    return;
  }
  const p = placement(fn, { 'param[0]': list[0]!.param }, options, HYPER_KEYS);
  args.push(...hyper(fn, options));
  for (let i = 0; i < list.length; i++) {
    const e = list[i]!;
    for (const role of ROLES) {
      const t = e[role];
      deviceArg(fn, t, `${role}[${i}]`, p.stream);
      if (role !== 'param') shapeArg(fn, t, `${role}[${i}]`, e.param.shape, `shape of param[${i}]`);
    }
    args.push(
      e.param.numel,
      e.param.buffer[BUFFER_HANDLE],
      e.param.byteOffset,
      e.grad.buffer[BUFFER_HANDLE],
      e.grad.byteOffset,
      e.m.buffer[BUFFER_HANDLE],
      e.m.byteOffset,
      e.v.buffer[BUFFER_HANDLE],
      e.v.byteOffset,
    );
  }
  enqueue(p, 'adamwMulti', ...(args as NativeModelOps['adamwMulti']));
}
