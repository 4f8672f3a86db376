/** Rotary position embedding, rotate-half convention (native/kernels/model/rope.cc). */
import type { Tensor } from '../../runtime/device/tensor.js';
import { BUFFER_HANDLE } from '../../runtime/native.js';
import { describe } from '../../runtime/device/dtype.js';
import { InvalidArgumentError } from '../../runtime/errors.js';
import { enqueue, fail, placement, prod, shapeArg, tensorArg, withOutputs, type KernelOptions } from './common.js';

/**
 * The rotation a rope type gives one rotary dim D: inv_freq[i] for i < D/2 (angle of pair i
 * at position p is p · invFreq[i]) and HF's attention_scaling, which multiplies cos and sin.
 * src/model/rope-scaling.ts builds it from a model's rope config; theta^(-2i/D) with scale 1
 * is the unscaled rope.
 */
export interface RopeTable {
  readonly invFreq: Float64Array;
  readonly scale: number;
}

export function tableArg(fn: string, table: RopeTable, D: number): void {
  const inv = (table as Partial<RopeTable> | undefined)?.invFreq;
  if (!(inv instanceof Float64Array) || inv.length !== D / 2 || !inv.every((f) => Number.isFinite(f))) {
    throw new InvalidArgumentError(
      `${fn}() expects table.invFreq to be a Float64Array of D/2 = ${D / 2} finite numbers but received ${describe(inv)}${inv instanceof Float64Array ? ` of length ${inv.length}` : ''}. HINT: build the table with ropeTable(cfg, D) for the head's rotary dim D.`,
      { op: fn, argument: 'table.invFreq' },
    );
  }
  const scale = table.scale;
  if (typeof scale !== 'number' || !(scale > 0) || !Number.isFinite(scale)) {
    throw new InvalidArgumentError(
      `${fn}() expects table.scale to be a positive finite number but received ${describe(scale)}. HINT: 1 is the unscaled rope.`,
      {
        op: fn,
        argument: 'table.scale',
      },
    );
  }
}

function ropeImpl(fn: string, x: Tensor, positions: Tensor, table: RopeTable, inverse: boolean, options?: KernelOptions): Tensor {
  tensorArg(fn, x, inverse ? 'dY' : 'x', 'fp32');
  tensorArg(fn, positions, 'positions', 'int32');
  const p = placement(fn, { x, positions }, options);
  if (x.shape.length < 3) fail(fn, `expects x of shape [T, nHeads, D] or [B, S, nHeads, D] but received [${x.shape.join(', ')}].`);
  const [heads, D] = x.shape.slice(-2) as [number, number];
  if (D === 0 || D % 2 !== 0) fail(fn, `the head dim D must be even and positive but is ${D}.`, { D });
  tableArg(fn, table, D);
  const lead = x.shape.slice(0, -2);
  shapeArg(fn, positions, 'positions', lead, 'leading dims of x');
  return withOutputs(p.device, { y: [x.shape, 'fp32'] }, ({ y }) =>
    enqueue(
      p,
      'rope',
      prod(lead),
      heads,
      D,
      table.invFreq,
      table.scale,
      inverse,
      x.buffer[BUFFER_HANDLE],
      x.byteOffset,
      positions.buffer[BUFFER_HANDLE],
      positions.byteOffset,
      y.buffer[BUFFER_HANDLE],
      0,
    ),
  ).y;
}

/**
 * Rotates pairs (i, i + D/2) of every head by pos · invFreq[i] and multiplies by table.scale
 * (HF Llama / Qwen3 rotate_half with cos and sin times attention_scaling). x [T, nHeads, D]
 * with positions int32 [T], or [B, S, nHeads, D] with positions [B, S]. Angles in double,
 * cos/sin rounded to fp32.
 */
export function rope(x: Tensor, positions: Tensor, table: RopeTable, options?: KernelOptions): Tensor {
  return ropeImpl('rope', x, positions, table, false, options);
}

/** Backward of rope(): the inverse rotation of dY, times the same scale. */
export function ropeBackward(dY: Tensor, positions: Tensor, table: RopeTable, options?: KernelOptions): Tensor {
  return ropeImpl('ropeBackward', dY, positions, table, true, options);
}
