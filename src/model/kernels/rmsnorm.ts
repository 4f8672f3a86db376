/** RMSNorm forward and backward (native/kernels/model/rmsnorm.cc). */
import type { Tensor } from '../../runtime/device/tensor.js';
import { BUFFER_HANDLE } from '../../runtime/native.js';
import { enqueue, numberArg, placement, prod, shapeArg, tensorArg, withOutputs, type KernelOptions } from './common.js';

export interface RmsNormResult {
  /** x * rstd * w, shape of x. */
  y: Tensor;
  /** 1 / sqrt(mean(x^2) + eps) per row: shape x.shape without the last dim. */
  rstd: Tensor;
}

/** y = x * rsqrt(mean(x^2, last dim) + eps) * w. x [..., H] fp32, w [H] fp32 (Qwen3 eps 1e-6). */
export function rmsNorm(x: Tensor, w: Tensor, eps = 1e-6, options?: KernelOptions): RmsNormResult {
  const fn = 'rmsNorm';
  tensorArg(fn, x, 'x', 'fp32');
  tensorArg(fn, w, 'w', 'fp32');
  numberArg(fn, eps, 'eps', (e) => e >= 0, '>= 0');
  const p = placement(fn, { x, w }, options);
  if (x.shape.length < 1) shapeArg(fn, x, 'x', [null, null], 'T, H');
  const H = x.shape[x.shape.length - 1]!;
  shapeArg(fn, w, 'w', [H], 'H');
  if (H === 0) shapeArg(fn, x, 'x', [...x.shape.slice(0, -1), null], '..., H > 0');
  const lead = x.shape.slice(0, -1);
  const T = prod(lead);
  return withOutputs(p.device, { y: [x.shape, 'fp32'], rstd: [lead, 'fp32'] }, ({ y, rstd }) =>
    enqueue(
      p,
      'rmsNorm',
      T,
      H,
      eps,
      x.buffer[BUFFER_HANDLE],
      x.byteOffset,
      w.buffer[BUFFER_HANDLE],
      w.byteOffset,
      y.buffer[BUFFER_HANDLE],
      0,
      rstd.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

export interface RmsNormGrads {
  dx: Tensor;
  dw: Tensor;
}

/** Gradients of rmsNorm from the saved rstd: dx (shape of x) and dw [H] (summed over rows). */
export function rmsNormBackward(dY: Tensor, x: Tensor, w: Tensor, rstd: Tensor, options?: KernelOptions): RmsNormGrads {
  const fn = 'rmsNormBackward';
  for (const [n, t] of [
    ['dY', dY],
    ['x', x],
    ['w', w],
    ['rstd', rstd],
  ] as const)
    tensorArg(fn, t, n, 'fp32');
  const p = placement(fn, { dY, x, w, rstd }, options);
  if (x.shape.length < 1) shapeArg(fn, x, 'x', [null, null], 'T, H');
  const H = x.shape[x.shape.length - 1]!;
  const lead = x.shape.slice(0, -1);
  shapeArg(fn, dY, 'dY', x.shape, 'shape of x');
  shapeArg(fn, w, 'w', [H], 'H');
  shapeArg(fn, rstd, 'rstd', lead, 'x.shape without H');
  if (H === 0) shapeArg(fn, x, 'x', [...lead, null], '..., H > 0');
  return withOutputs(p.device, { dx: [x.shape, 'fp32'], dw: [[H], 'fp32'] }, ({ dx, dw }) =>
    enqueue(
      p,
      'rmsNormBackward',
      prod(lead),
      H,
      dY.buffer[BUFFER_HANDLE],
      dY.byteOffset,
      x.buffer[BUFFER_HANDLE],
      x.byteOffset,
      w.buffer[BUFFER_HANDLE],
      w.byteOffset,
      rstd.buffer[BUFFER_HANDLE],
      rstd.byteOffset,
      dx.buffer[BUFFER_HANDLE],
      0,
      dw.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}
