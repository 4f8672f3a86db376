/**
 * A dense, row-major tensor in device memory. The host sees its data only through
 * explicit copies (`fromArray`, `toArray`); every device->host read counts as a
 * host sync in the device stats. `handle()` is a plain object another thread turns
 * back into a Tensor over the same memory with `Tensor.fromHandle()`.
 */
import { Device, checkOptions, checkOrdinal, checkSize, importBuffer, type DeviceBuffer } from './device.js';
import { DTYPE_CODE, checkDType, describe, dtypeSize, isFloatDType, type DType } from './dtype.js';
import { InvalidArgumentError, InvalidStateError } from '../errors.js';
import { BUFFER_HANDLE, enqueueWithCompletion } from '../native.js';
import type { Stream } from './stream.js';
import { checkTimeout } from './stream.js';

/** Plain, structured-cloneable description of a tensor; valid while some holder keeps it alive. */
export interface TensorHandle {
  kind: 'ascent.tensor';
  bufferId: number;
  device: number;
  dtype: DType;
  shape: number[];
  strides: number[];
  byteOffset: number;
}

export type HostArray = Float32Array | Int32Array | BigInt64Array | Uint8Array;
export type HostData = HostArray | Uint16Array | readonly number[];

export function checkShape(shape: unknown, what = 'shape'): number[] {
  if (!Array.isArray(shape) || shape.length > 16 || shape.some((d) => typeof d !== 'number' || !Number.isSafeInteger(d) || d < 0)) {
    throw new InvalidArgumentError(
      `Expected an array of at most 16 non-negative integers for ${what} but received ${describe(shape)}${Array.isArray(shape) ? ` [${shape.join(', ')}]` : ''}.`,
      { argument: what },
    );
  }
  return [...(shape as number[])];
}

export function contiguousStrides(shape: readonly number[]): number[] {
  const strides = new Array<number>(shape.length);
  let s = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i]!;
  }
  return strides;
}

export function numelOf(shape: readonly number[]): number {
  // A plain loop: reduce's callback was a visible part of building every op's output tensor.
  let n = 1;
  for (let i = 0; i < shape.length; i++) n *= shape[i]!;
  return n;
}

export function resolveStream(stream: unknown, device: Device, fn: string): Stream {
  if (stream === undefined) return device.defaultStream;
  if (typeof stream !== 'object' || stream === null || !('native' in stream) || !('device' in stream)) {
    throw new InvalidArgumentError(`Expected a Stream for the stream option of ${fn} but received ${describe(stream)}.`, { fn });
  }
  return stream as Stream;
}

function inferDType(data: HostData): DType | undefined {
  if (data instanceof Float32Array) return 'fp32';
  if (data instanceof Int32Array) return 'int32';
  if (data instanceof BigInt64Array) return 'int64';
  if (data instanceof Uint8Array) return 'uint8';
  if (Array.isArray(data)) return 'fp32';
  return undefined;
}

// Set by Tensor.own / ownMatrix for the one constructor call each makes: ADOPT_SHAPE keeps (and
// freezes) its fresh shape array, ADOPT_LAYOUT keeps shape and strides that are frozen already.
const ADOPT_SHAPE = 1;
const ADOPT_LAYOUT = 2;
let adopt = 0;

// The last layout Tensor.ownMatrix built, frozen: a loop of same-shaped matmuls reuses it.
let matrixRows = -1;
let matrixCols = -1;
let matrixShape: readonly number[] = Object.freeze([]);
let matrixStrides: readonly number[] = Object.freeze([]);

export class Tensor {
  readonly device: Device;
  readonly dtype: DType;
  readonly shape: readonly number[];
  /** In elements. Tensors made here are contiguous. */
  readonly strides: readonly number[];
  readonly byteOffset: number;
  readonly numel: number;
  /** @internal */
  buffer: DeviceBuffer;

  /** @internal Use Tensor.empty / zeros / fromArray / fromHandle. */
  constructor(device: Device, buffer: DeviceBuffer, dtype: DType, shape: readonly number[], strides?: readonly number[], byteOffset = 0) {
    // Read first and cleared at once (nothing before it can throw), so only own's and ownMatrix's calls adopt.
    const mode = adopt;
    adopt = 0;
    this.device = device;
    this.buffer = buffer;
    this.dtype = dtype;
    if (mode === ADOPT_LAYOUT) {
      this.shape = shape;
      this.strides = strides!;
      this.byteOffset = byteOffset;
      this.numel = numelOf(shape);
      this.#contiguous = true;
      return;
    }
    this.shape = Object.freeze(mode === ADOPT_SHAPE ? (shape as number[]) : [...shape]);
    // Strides and numel read the frozen shape, not the caller's array: every tensor's shape then has
    // the same (frozen) element kind, so these loads stay monomorphic, whatever arrays callers pass.
    // Computed strides are a fresh array already: frozen as they are, not copied again.
    this.strides = Object.freeze(strides === undefined ? contiguousStrides(this.shape) : [...strides]);
    this.byteOffset = byteOffset;
    this.numel = numelOf(this.shape);
    if (strides === undefined) this.#contiguous = true;
  }

  /**
   * @internal A contiguous tensor over a whole new buffer whose `shape` is a fresh array of valid
   * dims that nobody else holds: it is frozen and kept, not copied. An op's output is built once
   * per call, and at a 64 x 64 matmul (a ~3 us kernel) the constructor's copies of shape and
   * strides, and the young-generation collections they drove, were a measurable part of the op.
   */
  static own(device: Device, buffer: DeviceBuffer, dtype: DType, shape: number[]): Tensor {
    adopt = ADOPT_SHAPE;
    return new Tensor(device, buffer, dtype, shape);
  }

  /**
   * @internal Tensor.own for a contiguous [rows, cols] tensor, whose shape and strides are the
   * frozen arrays of the previous call when the dims repeat (both are immutable, so tensors can
   * share them). Object.freeze is a runtime call per array, and with the two fresh arrays it was
   * about a tenth of a 64 x 64 matmul's dispatch; a training loop's matmuls repeat their shapes.
   */
  static ownMatrix(device: Device, buffer: DeviceBuffer, dtype: DType, rows: number, cols: number): Tensor {
    if (rows !== matrixRows || cols !== matrixCols) {
      matrixShape = Object.freeze([rows, cols]);
      matrixStrides = Object.freeze(contiguousStrides(matrixShape));
      matrixRows = rows;
      matrixCols = cols;
    }
    adopt = ADOPT_LAYOUT;
    return new Tensor(device, buffer, dtype, matrixShape, matrixStrides);
  }

  get nbytes(): number {
    return this.numel * dtypeSize(this.dtype);
  }

  get released(): boolean {
    return this.buffer.released;
  }

  get isContiguous(): boolean {
    // Shape and strides are frozen, so this is computed once: every op checks it on every
    // input, and the strides array it built each time was a measurable part of a small op.
    if (this.#contiguous === undefined) {
      const c = contiguousStrides(this.shape);
      this.#contiguous = this.shape.every((d, i) => d <= 1 || this.strides[i] === c[i]);
    }
    return this.#contiguous;
  }
  #contiguous: boolean | undefined;

  /**
   * The same memory seen with another shape (one dim may be -1, inferred). Only for
   * contiguous tensors; the view shares the buffer, so releasing either releases both.
   */
  reshape(shape: readonly number[]): Tensor {
    this.checkLive('x');
    if (!Array.isArray(shape) || shape.some((d) => !Number.isSafeInteger(d) || d < -1)) {
      throw new InvalidArgumentError(`Expected a shape of non-negative integers (one may be -1) but received ${JSON.stringify(shape)}.`, { argument: 'shape' });
    }
    const inferred = shape.filter((d) => d === -1).length;
    if (inferred > 1)
      throw new InvalidArgumentError(`Only one dim of a reshape may be -1, but ${JSON.stringify(shape)} has ${inferred}.`, { argument: 'shape' });
    const known = shape.filter((d) => d !== -1).reduce((a, b) => a * b, 1);
    const out = inferred && known > 0 && this.numel % known === 0 ? shape.map((d) => (d === -1 ? this.numel / known : d)) : [...shape];
    if (numelOf(out.map((d) => Math.max(d, 0))) !== this.numel || out.includes(-1)) {
      throw new InvalidArgumentError(`Cannot reshape a tensor of shape [${this.shape.join(', ')}] (${this.numel} elements) to [${shape.join(', ')}].`, {
        argument: 'shape',
      });
    }
    if (!this.isContiguous) {
      throw new InvalidArgumentError(
        `reshape() needs a contiguous tensor; this one has strides [${this.strides.join(', ')}]. HINT: permute() returns a contiguous copy.`,
      );
    }
    return new Tensor(this.device, this.buffer, this.dtype, out, undefined, this.byteOffset);
  }

  /** Uninitialised device memory. Throws DeviceOOMError when it does not fit. */
  static empty(device: Device, shape: readonly number[], dtype: DType = 'fp32'): Tensor {
    const s = checkShape(shape);
    const dt = checkDType(dtype);
    return new Tensor(device, device.alloc(numelOf(s) * dtypeSize(dt)), dt, s);
  }

  static zeros(device: Device, shape: readonly number[], dtype: DType = 'fp32', options?: { stream?: Stream }): Tensor {
    checkOptions(options, ['stream'], 'Tensor.zeros()');
    const stream = resolveStream(options?.stream, device, 'Tensor.zeros()');
    checkStreamDevice(stream, device, 'Tensor.zeros()');
    const t = Tensor.empty(device, shape, dtype);
    stream.native.fill(t.buffer[BUFFER_HANDLE], 0, t.numel, DTYPE_CODE[t.dtype], 0, 0, 0);
    return t;
  }

  /**
   * Copies host data to a new tensor (the bytes are snapshotted at once). The dtype
   * defaults from the array type (number[] -> fp32). bf16/fp16 take numbers (rounded
   * on the device, to nearest even) or a Uint16Array of raw bits.
   */
  static fromArray(device: Device, data: HostData, shape: readonly number[], options?: { dtype?: DType; stream?: Stream }): Tensor {
    checkOptions(options, ['dtype', 'stream'], 'Tensor.fromArray()');
    const s = checkShape(shape);
    const stream = resolveStream(options?.stream, device, 'Tensor.fromArray()');
    checkStreamDevice(stream, device, 'Tensor.fromArray()');
    const inferred = inferDType(data);
    const dtype = options?.dtype !== undefined ? checkDType(options.dtype) : inferred;
    if (dtype === undefined) {
      throw new InvalidArgumentError(
        `Expected a Float32Array, Int32Array, BigInt64Array, Uint8Array or number[] for Tensor.fromArray() but received ${describe(data)}. HINT: pass { dtype: 'bf16' } or 'fp16' with a Uint16Array of raw bits.`,
      );
    }
    const n = numelOf(s);
    if (data.length !== n) {
      throw new InvalidArgumentError(`Expected ${n} elements for shape [${s.join(', ')}] but received ${data.length}.`, { expected: n, received: data.length });
    }
    let host: ArrayBufferView;
    let hostDType: DType;
    if (data instanceof Uint16Array) {
      if (dtype !== 'bf16' && dtype !== 'fp16')
        throw new InvalidArgumentError(`A Uint16Array holds raw bf16/fp16 bits; expected dtype bf16 or fp16 but received ${dtype}.`);
      host = data;
      hostDType = dtype;
    } else if (Array.isArray(data)) {
      host = toHostArray(data as readonly number[], isFloatDType(dtype) ? 'fp32' : dtype);
      hostDType = isFloatDType(dtype) ? 'fp32' : dtype;
    } else {
      host = data as HostArray;
      hostDType = inferred!;
    }
    const t = Tensor.empty(device, s, dtype);
    if (hostDType === dtype) {
      stream.native.copyH2D(t.buffer[BUFFER_HANDLE], 0, host, 0);
    } else {
      // Upload as is, convert on the device; the staging buffer is released at once
      // (the pending ops keep it alive).
      const staging = device.alloc(host.byteLength);
      try {
        stream.native.copyH2D(staging, 0, host, 0);
        stream.native.cast(t.buffer[BUFFER_HANDLE], 0, DTYPE_CODE[dtype], staging, 0, DTYPE_CODE[hostDType], n, 0, 0);
      } finally {
        staging.release();
      }
    }
    return t;
  }

  /** A new Tensor over the same device memory, in this thread. */
  static fromHandle(handle: TensorHandle): Tensor {
    if (typeof handle !== 'object' || handle === null || handle.kind !== 'ascent.tensor') {
      throw new InvalidArgumentError(`Expected a tensor handle (from tensor.handle()) but received ${describe(handle)}.`);
    }
    checkOrdinal(handle.device);
    checkSize(handle.bufferId, 'bufferId');
    checkSize(handle.byteOffset, 'byteOffset');
    const dtype = checkDType(handle.dtype);
    const shape = checkShape(handle.shape);
    const buffer = importBuffer(handle.bufferId);
    if (buffer.device !== handle.device) {
      buffer.release();
      throw new InvalidArgumentError(`Handle says device ${handle.device} but buffer ${handle.bufferId} is on device ${buffer.device}.`);
    }
    return new Tensor(Device.get(handle.device), buffer, dtype, shape, handle.strides, handle.byteOffset);
  }

  handle(): TensorHandle {
    this.checkLive('tensor');
    return {
      kind: 'ascent.tensor',
      bufferId: this.buffer.id,
      device: this.device.ordinal,
      dtype: this.dtype,
      shape: [...this.shape],
      strides: [...this.strides],
      byteOffset: this.byteOffset,
    };
  }

  /**
   * Copies the tensor to the host after the work already on `stream` (default
   * stream of its device): Float32Array for fp32/bf16/fp16, Int32Array, BigInt64Array,
   * Uint8Array. Counts as one host sync.
   */
  async toArray(options?: { stream?: Stream; timeoutMs?: number }): Promise<HostArray> {
    checkOptions(options, ['stream', 'timeoutMs'], 'tensor.toArray()');
    const timeoutMs = checkTimeout(options?.timeoutMs === undefined ? undefined : { timeoutMs: options.timeoutMs }, 'tensor.toArray()');
    const site = new Error();
    this.checkLive('tensor');
    const stream = resolveStream(options?.stream, this.device, 'tensor.toArray()');
    checkStreamDevice(stream, this.device, 'tensor.toArray()');
    let src: DeviceBuffer = this.buffer;
    let offset = this.byteOffset;
    let outDType = this.dtype;
    let staging: DeviceBuffer | undefined;
    if (this.dtype === 'bf16' || this.dtype === 'fp16') {
      staging = this.device.alloc(this.numel * 4);
      try {
        stream.native.cast(staging, 0, DTYPE_CODE.fp32, this.buffer[BUFFER_HANDLE], this.byteOffset, DTYPE_CODE[this.dtype], this.numel, 0, 0);
      } catch (e) {
        staging.release();
        throw e;
      }
      src = staging;
      offset = 0;
      outDType = 'fp32';
    }
    const nbytes = this.numel * dtypeSize(outDType);
    let pending: { token: number; promise: Promise<ArrayBuffer | undefined> };
    try {
      pending = enqueueWithCompletion((tok) => stream.native.copyD2H(src, offset, nbytes, tok));
    } finally {
      staging?.release();
    }
    const bytes = (await stream.awaitToken(pending.token, pending.promise, timeoutMs, site, 'toArray'))!;
    switch (outDType) {
      case 'fp32':
        return new Float32Array(bytes);
      case 'int32':
        return new Int32Array(bytes);
      case 'int64':
        return new BigInt64Array(bytes);
      default:
        return new Uint8Array(bytes);
    }
  }

  /** Raw bytes of the tensor (counts as one host sync). */
  async toBytes(options?: { stream?: Stream; timeoutMs?: number }): Promise<Uint8Array> {
    checkOptions(options, ['stream', 'timeoutMs'], 'tensor.toBytes()');
    const timeoutMs = checkTimeout(options?.timeoutMs === undefined ? undefined : { timeoutMs: options.timeoutMs }, 'tensor.toBytes()');
    const site = new Error();
    this.checkLive('tensor');
    const stream = resolveStream(options?.stream, this.device, 'tensor.toBytes()');
    checkStreamDevice(stream, this.device, 'tensor.toBytes()');
    const { token, promise } = enqueueWithCompletion((tok) => stream.native.copyD2H(this.buffer[BUFFER_HANDLE], this.byteOffset, this.nbytes, tok));
    return new Uint8Array((await stream.awaitToken(token, promise, timeoutMs, site, 'toBytes'))!);
  }

  /** Drops this wrapper's reference. Memory returns to the pool once pending ops on it have run. */
  release(): void {
    this.buffer.release();
  }

  /** @internal */
  checkLive(name: string): void {
    if (this.buffer.released) {
      throw new InvalidStateError(`Tensor ${name} was released. HINT: do not use a tensor after release().`, { argument: name });
    }
  }

  toString(): string {
    return `Tensor(${this.dtype}[${this.shape.join(', ')}] on device ${this.device.ordinal})`;
  }
}

function toHostArray(data: readonly number[], dtype: DType): ArrayBufferView {
  switch (dtype) {
    case 'fp32':
      return Float32Array.from(data);
    case 'int32':
      return Int32Array.from(data);
    case 'int64':
      return BigInt64Array.from(data, (v) => BigInt(Math.trunc(v)));
    case 'uint8':
      return Uint8Array.from(data);
    default:
      throw new InvalidArgumentError(`Cannot build host data of dtype ${dtype} from numbers.`);
  }
}

export function checkStreamDevice(stream: Stream, device: Device, fn: string): void {
  if (stream.device.ordinal !== device.ordinal) {
    throw new InvalidArgumentError(
      `Expected a stream of device ${device.ordinal} for ${fn} but the stream belongs to device ${stream.device.ordinal}. HINT: use device.defaultStream or device.newStream() of device ${device.ordinal}.`,
      { expectedDevice: device.ordinal, streamDevice: stream.device.ordinal, fn },
    );
  }
}
