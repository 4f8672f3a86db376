/**
 * Shared validation for the model kernels, in the style of src/runtime/device/ops.ts:
 * every tensor live, contiguous, on the stream's device, with the expected dtype
 * and shape, every option known, all checked in TS with precise messages before
 * one native enqueue (stream.native.modelOp) with plain numbers and handles.
 * Nothing is allocated or enqueued when validation fails.
 */
import { checkOptions, type Device } from '../../runtime/device/device.js';
import { describe, type DType } from '../../runtime/device/dtype.js';
import { InvalidArgumentError } from '../../runtime/errors.js';
import type { NativeModelOps } from '../../runtime/native.js';
import type { Stream } from '../../runtime/device/stream.js';
import { Tensor, resolveStream } from '../../runtime/device/tensor.js';

export type KernelImpl = 'fast' | 'reference';

export interface KernelOptions {
  /** Stream to enqueue on (default: the device's default stream). */
  stream?: Stream;
  /** 'fast' (default) or 'reference' (the plain loops the fast kernel is tested against). */
  impl?: KernelImpl;
}

export const KERNEL_KEYS = ['stream', 'impl'] as const;

export interface Placement {
  stream: Stream;
  impl: number;
  device: Device;
}

function implCode(impl: unknown): number {
  if (impl === undefined || impl === 'fast') return 0;
  if (impl === 'reference') return 1;
  throw new InvalidArgumentError(`Expected 'fast' or 'reference' for impl but received ${describe(impl)}.`, { argument: 'impl' });
}

/** Checks a tensor argument: live, contiguous, of dtype `dtypes` (one or a list). */
export function tensorArg(fn: string, t: unknown, name: string, dtypes: DType | readonly DType[]): Tensor {
  if (!(t instanceof Tensor)) throw new InvalidArgumentError(`${fn}() expects a Tensor for ${name} but received ${describe(t)}.`, { op: fn, argument: name });
  t.checkLive(name);
  if (!t.isContiguous)
    throw new InvalidArgumentError(`${fn}(): tensor ${name} must be contiguous. HINT: use permute() to make a contiguous copy.`, { op: fn, argument: name });
  const allowed = typeof dtypes === 'string' ? [dtypes] : dtypes;
  if (!allowed.includes(t.dtype)) {
    const hint = allowed.includes('int32') ? ` HINT: cast(${name}, 'int32') first.` : ` HINT: cast(${name}, '${allowed[0]}') first.`;
    throw new InvalidArgumentError(`${fn}() expects ${name} of dtype ${allowed.join(' or ')} but received ${t.dtype}.${hint}`, {
      op: fn,
      argument: name,
      dtype: t.dtype,
    });
  }
  return t;
}

/**
 * Checks `t.shape` against `want` (a number is an exact size, null any size) and
 * returns it; `labels` names the dims in the message ("T, H").
 */
export function shapeArg(fn: string, t: Tensor, name: string, want: readonly (number | null)[], labels: string): number[] {
  const s = t.shape;
  const ok = s.length === want.length && want.every((w, i) => w === null || w === s[i]);
  if (!ok) {
    const expected = want.map((w) => (w === null ? '*' : String(w))).join(', ');
    throw new InvalidArgumentError(`${fn}() expects ${name} of shape [${labels}] = [${expected}] but received [${s.join(', ')}].`, {
      op: fn,
      argument: name,
      shape: [...s],
    });
  }
  return [...s];
}

/** Product of dims. */
export function prod(dims: readonly number[]): number {
  return dims.reduce((a, b) => a * b, 1);
}

/** Resolves options (extra keys allowed per kernel) and checks every tensor is on the stream's device. */
export function placement(fn: string, tensors: Record<string, Tensor>, options: object | undefined, extraKeys: readonly string[] = []): Placement {
  checkOptions(options, [...KERNEL_KEYS, ...extraKeys], `${fn}()`);
  const opts = (options ?? {}) as KernelOptions;
  const names = Object.keys(tensors);
  const first = tensors[names[0]!]!;
  const stream = resolveStream(opts.stream, first.device, `${fn}()`);
  for (const name of names) deviceArg(fn, tensors[name]!, name, stream);
  return { stream, impl: implCode(opts.impl), device: stream.device };
}

/** Checks that tensor `name` is on the device of `stream`. */
export function deviceArg(fn: string, t: Tensor, name: string, stream: Stream): void {
  const sd = stream.device.ordinal;
  if (t.device.ordinal !== sd) {
    throw new InvalidArgumentError(
      `${fn}() expects tensors on device ${sd} but ${name} is on device ${t.device.ordinal} (stream belongs to device ${sd}). HINT: use copyPeer() to move it first.`,
      { op: fn, argument: name, expectedDevice: sd, actualDevice: t.device.ordinal, streamDevice: sd },
    );
  }
}

export function intArg(fn: string, v: unknown, name: string, min = 0): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
    throw new InvalidArgumentError(`${fn}() expects an integer >= ${min} for ${name} but received ${describe(v)}.`, { op: fn, argument: name });
  }
  return v;
}

export function numberArg(fn: string, v: unknown, name: string, check?: (x: number) => boolean, range?: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || (check && !check(v))) {
    throw new InvalidArgumentError(`${fn}() expects a finite number${range ? ` ${range}` : ''} for ${name} but received ${describe(v)}.`, {
      op: fn,
      argument: name,
    });
  }
  return v;
}

export function boolArg(fn: string, v: unknown, name: string): boolean {
  if (typeof v !== 'boolean') throw new InvalidArgumentError(`${fn}() expects a boolean for ${name} but received ${describe(v)}.`, { op: fn, argument: name });
  return v;
}

export function fail(fn: string, message: string, details: Record<string, unknown> = {}): never {
  throw new InvalidArgumentError(`${fn}(): ${message}`, { op: fn, ...details });
}

/** Allocates the outputs; releases them all if the enqueue throws (a failed op leaves no allocation behind). */
export function withOutputs<N extends string>(
  device: Device,
  specs: Record<N, [shape: readonly number[], dtype: DType]>,
  enqueue: (out: Record<N, Tensor>) => void,
): Record<N, Tensor> {
  const out = {} as Record<N, Tensor>;
  try {
    for (const name of Object.keys(specs) as N[]) {
      const [shape, dtype] = specs[name];
      out[name] = Tensor.empty(device, shape, dtype);
    }
    enqueue(out);
  } catch (e) {
    for (const t of Object.values(out) as Tensor[]) t.release();
    throw e;
  }
  return out;
}

/** Enqueues kernel `name` with `args` followed by impl and token 0. */
export function enqueue<K extends keyof NativeModelOps>(p: Placement, name: K, ...args: NativeModelOps[K]): void {
  (p.stream.native.modelOp as unknown as (name: string, ...rest: unknown[]) => number)(name, ...args, p.impl, 0);
}
