/**
 * A FIFO of device work run by its own native thread. Enqueueing returns at once;
 * `synchronize()` resolves when everything enqueued before it has run, without
 * blocking the event loop.
 */
import type { Device } from './device.js';
import { checkTimeout, type SynchronizeOptions } from './options.js';

export { checkTimeout, type SynchronizeOptions } from './options.js';
import { describe } from './dtype.js';
import { InvalidArgumentError, TimeoutError } from '../errors.js';
import { profiler } from '../profiler.js';
import type { Event } from './event.js';
import {
  enqueueWithCompletion,
  forgetCompletion,
  loadNative,
  withCallerStack,
  type NativePendingOp,
  type NativeStream,
  type NativeStreamStats,
} from '../native.js';

export type PendingOp = NativePendingOp;
export type StreamStats = NativeStreamStats;

export class Stream {
  readonly device: Device;
  /** @internal */
  readonly native: NativeStream;
  #destroyed = false;

  /** Use `device.newStream()`. */
  constructor(device: Device) {
    this.device = device;
    this.native = new (loadNative().Stream)(device.ordinal);
    profiler()?.trackStream(this.native);
  }

  get id(): number {
    return this.native.id;
  }

  /**
   * Whether destroy() was called. A JS field, not a native stats() call: `device.defaultStream`
   * reads it on every op that names no stream, and stats() builds a fresh object each time
   * (~10k instructions per op when an op resolved the default stream for each argument). While
   * JS holds this wrapper only destroy() stops the native stream (the other stops are the
   * wrapper's collection and the thread's teardown, after which no JS runs here).
   */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /**
   * Resolves once every op enqueued so far has run; rejects with the stream's
   * sticky StreamError if one failed, or with TimeoutError after `timeoutMs`.
   */
  synchronize(options?: SynchronizeOptions): Promise<void> {
    const timeoutMs = checkTimeout(options, 'synchronize()');
    const site = new Error();
    const { token, promise } = enqueueWithCompletion((tok) => this.native.marker(tok));
    return this.#await(token, promise, timeoutMs, site, 'synchronize').then(() => undefined);
  }

  /** @internal Waits for `token` with an optional deadline, rejecting with a TimeoutError that lists pending work. */
  #await<T>(token: number, promise: Promise<T>, timeoutMs: number | undefined, site: Error, what: string): Promise<T> {
    const end = profiler()?.begin('sync', what, { stream: this.id });
    const caught = promise.catch((err: Error) => {
      throw withCallerStack(err, site);
    });
    if (end) void caught.then(end, end);
    if (timeoutMs === undefined) return caught;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        forgetCompletion(token);
        reject(withCallerStack(this.timeoutError(what, timeoutMs), site));
      }, timeoutMs);
    });
    return Promise.race([caught, timeout]).finally(() => clearTimeout(timer));
  }

  /** @internal Awaits a completion registered by an op on this stream. */
  awaitToken<T>(token: number, promise: Promise<T>, timeoutMs: number | undefined, site: Error, what: string): Promise<T> {
    return this.#await(token, promise, timeoutMs, site, what);
  }

  timeoutError(what: string, timeoutMs: number): TimeoutError {
    const ops = this.pending();
    const lines = ops.map((o) => (o.state === 'running' ? `  #${o.seq} ${o.op} (running for ${o.runningMs.toFixed(0)} ms)` : `  #${o.seq} ${o.op} (queued)`));
    return new TimeoutError(
      `${what}() on stream ${this.id} (device ${this.device.ordinal}) timed out after ${timeoutMs} ms with ${ops.length} pending op(s):\n` +
        `${lines.join('\n') || '  (none)'}\nHINT: a long-running op, or a waitEvent() on an event that is never recorded, holds the stream.`,
      { device: this.device.ordinal, stream: this.id, timeoutMs, pending: ops },
    );
  }

  /** Makes later work on this stream wait until `event`'s latest record has completed. */
  waitEvent(event: Event): void {
    this.native.waitEvent(event.native, 0);
  }

  /** Records `event` (a new one on this device by default) at this point of the stream. */
  recordEvent(event?: Event): Event {
    const ev = event ?? this.device.newEvent();
    ev.record(this);
    return ev;
  }

  /** Debug op (like torch.cuda._sleep): the stream thread sleeps `ms`; wakes on destroy(). */
  sleep(ms: number): void {
    if (typeof ms !== 'number' || !(ms >= 0) || !Number.isFinite(ms)) {
      throw new InvalidArgumentError(`Expected a non-negative finite number of ms for sleep() but received ${describe(ms)}.`, { argument: 'ms' });
    }
    this.native.sleep(ms, 0);
  }

  /** Debug op: fails when it runs, leaving the sticky error that synchronize() reports. */
  fail(message: string): void {
    if (typeof message !== 'string') throw new InvalidArgumentError(`Expected a string message for fail() but received ${describe(message)}.`);
    this.native.fail(message, 0);
  }

  /** Ops not yet finished: the running one first, then the queue (seq = enqueue order). */
  pending(): PendingOp[] {
    return this.native.pending();
  }

  stats(): StreamStats {
    return this.native.stats();
  }

  /**
   * Stops the stream thread: a running sleep or event wait is interrupted, queued
   * ops are dropped and their awaiters reject with StreamError. Idempotent.
   */
  destroy(): void {
    this.#destroyed = true;
    profiler()?.releaseStream(this.native);
    this.native.destroy();
  }

  toString(): string {
    return `Stream(${this.id} on device ${this.device.ordinal})`;
  }
}
