/**
 * A block of device memory as JS holds it: a plain object over an opaque native handle
 * (native/device/buffer_table.h). Every op allocates its output, and every op checks its
 * inputs are live, so both are kept cheap: making a buffer is one native call, `released`
 * is a JS field (no native call per check), release() is one native call. The memory of a
 * buffer nobody released returns to the pool when its handle is garbage-collected.
 */
import { BUFFER_HANDLE, BUFFER_INFO, loadNative, type NativeBuffer, type NativeBufferHandle } from '../native.js';

export class DeviceBuffer implements NativeBuffer {
  /** @internal Native ops find the block through it. */
  readonly [BUFFER_HANDLE]: NativeBufferHandle;
  /** Process-unique; another thread imports the memory by it (importBuffer). */
  readonly id: number;
  readonly device: number;
  /** Bytes requested (the pool block is rounded up to 64). */
  readonly size: number;
  #released = false;

  /** @internal Made by Device.alloc and importBuffer, right after the native call that wrote BUFFER_INFO. */
  constructor(handle: NativeBufferHandle) {
    this[BUFFER_HANDLE] = handle;
    this.id = BUFFER_INFO[0]!;
    this.device = BUFFER_INFO[1]!;
    this.size = BUFFER_INFO[2]!;
  }

  /** Whether release() was called on this object (other holders of the memory are not affected). */
  get released(): boolean {
    return this.#released;
  }

  /** Drops this object's reference; pending ops keep the memory alive until they ran. Idempotent. */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    loadNative().releaseBuffer(this[BUFFER_HANDLE]);
  }

  toString(): string {
    return `DeviceBuffer(${this.id}: ${this.size} bytes on device ${this.device}${this.#released ? ', released' : ''})`;
  }
}
