/**
 * The TS face of one emulated NPU device: its memory pool (process-global, shared
 * by every thread) and this thread's streams and events on it.
 */
import { envBytes, parseBytes } from '../env.js';
import { InvalidArgumentError } from '../errors.js';
import { Event } from './event.js';
import { checkOptions } from './options.js';

export { checkOptions } from './options.js';
import { loadNative, type NativeDeviceStats } from '../native.js';
import { DeviceBuffer } from './buffer.js';
import { Stream } from './stream.js';
import { describe } from './dtype.js';

export type DeviceStats = NativeDeviceStats;
export { DeviceBuffer } from './buffer.js';

const DEFAULT_CAPACITY = 16 * 1024 ** 3;

export function checkOrdinal(value: unknown, what = 'device ordinal'): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value >= 1024) {
    throw new InvalidArgumentError(`Expected an integer in [0, 1024) for ${what} but received ${describe(value)}.`, { argument: what });
  }
  return value;
}

export function checkSize(value: unknown, what: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidArgumentError(`Expected a non-negative integer for ${what} but received ${describe(value)}.`, { argument: what });
  }
  return value;
}

export interface ConfigureDeviceOptions {
  /** Bytes (or a size string like `512MiB`); at most the host's RAM. */
  capacityBytes: number | string;
}

/**
 * Sets the memory capacity of device `ordinal` (process-wide). Call before the
 * first allocation: a device with live allocations keeps its capacity and a
 * different value is an InvalidArgumentError.
 */
export function configureDevice(ordinal: number, options: ConfigureDeviceOptions): Device {
  checkOrdinal(ordinal);
  checkOptions(options, ['capacityBytes'], 'configureDevice()');
  if (options === undefined || options.capacityBytes === undefined) {
    throw new InvalidArgumentError('configureDevice() requires { capacityBytes }.', { device: ordinal });
  }
  let bytes: number;
  try {
    bytes = parseBytes(options.capacityBytes, 'capacityBytes');
  } catch (e) {
    throw new InvalidArgumentError((e as Error).message, { device: ordinal, argument: 'capacityBytes' });
  }
  loadNative().deviceConfigure(ordinal, bytes);
  return Device.get(ordinal);
}

/** Capacity a device gets on first use: ASCENT_DEVICE_MEMORY (default 16GiB), bounded by host RAM natively. */
export function defaultDeviceCapacity(): number {
  return envBytes('ASCENT_DEVICE_MEMORY') ?? DEFAULT_CAPACITY;
}

const devices = new Map<number, Device>();

export class Device {
  readonly ordinal: number;
  #defaultStream: Stream | undefined;

  private constructor(ordinal: number) {
    this.ordinal = ordinal;
  }

  /** The device with this ordinal (created on first use, process-wide; one object per thread). */
  static get(ordinal: number): Device {
    checkOrdinal(ordinal);
    let d = devices.get(ordinal);
    if (!d) {
      loadNative().deviceGet(ordinal, defaultDeviceCapacity());
      d = new Device(ordinal);
      devices.set(ordinal, d);
    }
    return d;
  }

  get capacity(): number {
    return this.stats().capacity;
  }

  /** Raw device memory (64-byte aligned). Throws DeviceOOMError when it does not fit. */
  alloc(bytes: number): DeviceBuffer {
    checkSize(bytes, 'bytes');
    return new DeviceBuffer(loadNative().alloc(this.ordinal, bytes));
  }

  stats(): DeviceStats {
    return loadNative().deviceStats(this.ordinal);
  }

  /** Sets `peak` to what is allocated now. */
  resetPeakStats(): void {
    loadNative().deviceResetPeak(this.ordinal);
  }

  /**
   * Returns the pages of freed blocks that the pool keeps for reuse (`stats().cached`) to the OS,
   * as torch.cuda.empty_cache() does, and returns how many bytes that was. Freed memory stays
   * resident up to the device's high-water mark, so the next step's (or the next sync's) buffers
   * do not fault their pages in again; call this when the memory is wanted elsewhere (an engine's
   * sleep() leaves it cached: a colocated trainer reuses it). Buffers still queued on a stream are
   * not yet free: synchronize first.
   */
  emptyCache(): number {
    return loadNative().deviceEmptyCache(this.ordinal);
  }

  /** A new stream with its own native thread. Destroy it when done (device.defaultStream is shared). */
  newStream(): Stream {
    return new Stream(this);
  }

  /** This thread's default stream of the device (created on first use). */
  get defaultStream(): Stream {
    if (!this.#defaultStream || this.#defaultStream.destroyed) this.#defaultStream = new Stream(this);
    return this.#defaultStream;
  }

  newEvent(): Event {
    return new Event(this);
  }

  toString(): string {
    return `Device(${this.ordinal})`;
  }
}

/** A new wrapper (own reference) for a live device buffer created in any thread. */
export function importBuffer(id: number): DeviceBuffer {
  checkSize(id, 'buffer id');
  return new DeviceBuffer(loadNative().importBuffer(id));
}
