/** Rotary position embedding, rotate-half convention (native/kernels/model/rope.cc). */
import type { Tensor } from '../../runtime/device/tensor.js';
import { enqueue, fail, numberArg, placement, prod, shapeArg, tensorArg, withOutputs, type KernelOptions } from './common.js';

function ropeImpl(fn: string, x: Tensor, positions: Tensor, theta: number, inverse: boolean, options?: KernelOptions): Tensor {
  tensorArg(fn, x, inverse ? 'dY' : 'x', 'fp32');
  tensorArg(fn, positions, 'positions', 'int32');
  numberArg(fn, theta, 'theta', (t) => t > 0, '> 0');
  const p = placement(fn, { x, positions }, options);
  if (x.shape.length < 3) fail(fn, `expects x of shape [T, nHeads, D] or [B, S, nHeads, D] but received [${x.shape.join(', ')}].`);
  const [heads, D] = x.shape.slice(-2) as [number, number];
  if (D === 0 || D % 2 !== 0) fail(fn, `the head dim D must be even and positive but is ${D}.`, { D });
  const lead = x.shape.slice(0, -2);
  shapeArg(fn, positions, 'positions', lead, 'leading dims of x');
  return withOutputs(p.device, { y: [x.shape, 'fp32'] }, ({ y }) =>
    enqueue(p, 'rope', prod(lead), heads, D, theta, inverse, x.buffer, x.byteOffset, positions.buffer, positions.byteOffset, y.buffer, 0),
  ).y;
}

/**
 * Rotates pairs (i, i + D/2) of every head by pos * theta^(-2i/D) (HF Llama / Qwen3
 * rotate_half). x [T, nHeads, D] with positions int32 [T], or [B, S, nHeads, D] with
 * positions [B, S]. Angles in double, cos/sin rounded to fp32. Qwen3 theta: 1e6.
 */
export function rope(x: Tensor, positions: Tensor, theta: number, options?: KernelOptions): Tensor {
  return ropeImpl('rope', x, positions, theta, false, options);
}

/** Backward of rope(): the inverse rotation of dY. */
export function ropeBackward(dY: Tensor, positions: Tensor, theta: number, options?: KernelOptions): Tensor {
  return ropeImpl('ropeBackward', dY, positions, theta, true, options);
}
