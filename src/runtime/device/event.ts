/** Events order work across streams and time it (elapsedTime in ms). */
import type { Device } from './device.js';
import { InvalidArgumentError } from '../errors.js';
import { awaitCompletion, enqueueWithCompletion, isCompletionPending, loadNative, type NativeEvent } from '../native.js';
import type { Stream } from './stream.js';
import { checkTimeout, type SynchronizeOptions } from './options.js';

export class Event {
  readonly device: Device;
  /** @internal */
  readonly native: NativeEvent;
  #last: { token: number; promise: Promise<unknown>; stream: Stream } | undefined;

  /** Use `device.newEvent()`. */
  constructor(device: Device) {
    this.device = device;
    this.native = new (loadNative().Event)(device.ordinal);
  }

  /** Records the event on `stream` (default: the device's default stream). */
  record(stream?: Stream): this {
    const s = stream ?? this.device.defaultStream;
    if (s.device.ordinal !== this.device.ordinal) {
      throw new InvalidArgumentError(
        `Expected a stream of device ${this.device.ordinal} to record this event but the stream belongs to device ${s.device.ordinal}. HINT: create the event with the stream's device.newEvent().`,
        { eventDevice: this.device.ordinal, streamDevice: s.device.ordinal },
      );
    }
    const { token, promise } = enqueueWithCompletion((tok) => s.native.recordEvent(this.native, tok), false);
    this.#last = { token, promise, stream: s };
    return this;
  }

  /** True once the latest record has run (or the event was never recorded). */
  query(): boolean {
    return this.native.query();
  }

  /** Milliseconds between this event's completion and `end`'s; both must have completed. */
  elapsedTime(end: Event): number {
    if (!(end instanceof Event)) throw new InvalidArgumentError('Expected an Event for elapsedTime(end).');
    return this.native.elapsedTime(end.native);
  }

  /**
   * Resolves when the latest record has run (at once when never recorded); rejects with the
   * recording stream's error when that record never ran (the stream failed before it).
   */
  synchronize(options?: SynchronizeOptions): Promise<void> {
    const timeoutMs = checkTimeout(options, 'synchronize()');
    const last = this.#last;
    if (!last) return Promise.resolve();
    if (this.query()) {
      // Done, or failed: the record op's own completion says which.
      if (isCompletionPending(last.token)) awaitCompletion(last.token);
      return last.promise.then(() => undefined);
    }
    // The record's own completion was dropped by an earlier timeout: a stream
    // marker behind it waits at least as long.
    if (!isCompletionPending(last.token)) return last.stream.synchronize(options);
    awaitCompletion(last.token);
    return last.stream.awaitToken(last.token, last.promise, timeoutMs, new Error(), 'event.synchronize').then(() => undefined);
  }
}
