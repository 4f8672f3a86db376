/** SwiGLU activation, separate or fused gate_up, and backward (native/kernels/model/swiglu.cc). */
import type { Tensor } from '../../runtime/device/tensor.js';
import { BUFFER_HANDLE } from '../../runtime/native.js';
import { enqueue, fail, placement, prod, shapeArg, tensorArg, withOutputs, type KernelOptions } from './common.js';

function rows(fn: string, t: Tensor, name: string): [number, number] {
  if (t.shape.length < 1) fail(fn, `expects ${name} with at least one dim but received a scalar.`);
  return [prod(t.shape.slice(0, -1)), t.shape[t.shape.length - 1]!];
}

/** h = silu(gate) * up, elementwise; gate and up of one shape [..., I], fp32. */
export function swiglu(gate: Tensor, up: Tensor, options?: KernelOptions): Tensor {
  const fn = 'swiglu';
  tensorArg(fn, gate, 'gate', 'fp32');
  tensorArg(fn, up, 'up', 'fp32');
  const p = placement(fn, { gate, up }, options);
  shapeArg(fn, up, 'up', gate.shape, 'shape of gate');
  const [N, I] = rows(fn, gate, 'gate');
  return withOutputs(p.device, { h: [gate.shape, 'fp32'] }, ({ h }) =>
    enqueue(p, 'swiglu', N, I, I, I, gate.buffer[BUFFER_HANDLE], gate.byteOffset, up.buffer[BUFFER_HANDLE], up.byteOffset, h.buffer[BUFFER_HANDLE], 0),
  ).h;
}

export interface SwigluGrads {
  dGate: Tensor;
  dUp: Tensor;
}

export function swigluBackward(dH: Tensor, gate: Tensor, up: Tensor, options?: KernelOptions): SwigluGrads {
  const fn = 'swigluBackward';
  for (const [n, t] of [
    ['dH', dH],
    ['gate', gate],
    ['up', up],
  ] as const)
    tensorArg(fn, t, n, 'fp32');
  const p = placement(fn, { dH, gate, up }, options);
  shapeArg(fn, up, 'up', gate.shape, 'shape of gate');
  shapeArg(fn, dH, 'dH', gate.shape, 'shape of gate');
  const [N, I] = rows(fn, gate, 'gate');
  return withOutputs(p.device, { dGate: [gate.shape, 'fp32'], dUp: [up.shape, 'fp32'] }, ({ dGate, dUp }) =>
    enqueue(
      p,
      'swigluBackward',
      N,
      I,
      I,
      I,
      dH.buffer[BUFFER_HANDLE],
      dH.byteOffset,
      gate.buffer[BUFFER_HANDLE],
      gate.byteOffset,
      up.buffer[BUFFER_HANDLE],
      up.byteOffset,
      dGate.buffer[BUFFER_HANDLE],
      0,
      dUp.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

/**
 * SwiGLU on a fused projection gateUp [..., 2I] (HF `gate_up_proj` output:
 * gate = first half of the last dim, up = second half) -> h [..., I].
 */
export function swigluFused(gateUp: Tensor, options?: KernelOptions): Tensor {
  const fn = 'swigluFused';
  tensorArg(fn, gateUp, 'gateUp', 'fp32');
  const p = placement(fn, { gateUp }, options);
  const [N, I2] = rows(fn, gateUp, 'gateUp');
  if (I2 % 2 !== 0) fail(fn, `the last dim of gateUp must be even (gate ‖ up) but is ${I2}.`);
  const I = I2 / 2;
  const upOff = N > 0 ? I * 4 : 0; // an empty tensor has no second half to point at
  return withOutputs(p.device, { h: [[...gateUp.shape.slice(0, -1), I], 'fp32'] }, ({ h }) =>
    enqueue(
      p,
      'swiglu',
      N,
      I,
      I2,
      I2,
      gateUp.buffer[BUFFER_HANDLE],
      gateUp.byteOffset,
      gateUp.buffer[BUFFER_HANDLE],
      gateUp.byteOffset + upOff,
      h.buffer[BUFFER_HANDLE],
      0,
    ),
  ).h;
}

/** Backward of swigluFused(): dGateUp [..., 2I] (dGate ‖ dUp). */
export function swigluFusedBackward(dH: Tensor, gateUp: Tensor, options?: KernelOptions): Tensor {
  const fn = 'swigluFusedBackward';
  tensorArg(fn, dH, 'dH', 'fp32');
  tensorArg(fn, gateUp, 'gateUp', 'fp32');
  const p = placement(fn, { dH, gateUp }, options);
  const [N, I2] = rows(fn, gateUp, 'gateUp');
  if (I2 % 2 !== 0) fail(fn, `the last dim of gateUp must be even (gate ‖ up) but is ${I2}.`);
  const I = I2 / 2;
  shapeArg(fn, dH, 'dH', [...gateUp.shape.slice(0, -1), I], '..., I');
  const upOff = N > 0 ? I * 4 : 0;
  return withOutputs(p.device, { d: [gateUp.shape, 'fp32'] }, ({ d }) =>
    enqueue(
      p,
      'swigluBackward',
      N,
      I,
      I2,
      I2,
      dH.buffer[BUFFER_HANDLE],
      dH.byteOffset,
      gateUp.buffer[BUFFER_HANDLE],
      gateUp.byteOffset,
      gateUp.buffer[BUFFER_HANDLE],
      gateUp.byteOffset + upOff,
      d.buffer[BUFFER_HANDLE],
      0,
      d.buffer[BUFFER_HANDLE],
      upOff,
    ),
  ).d;
}
