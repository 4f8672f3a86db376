/**
 * The completion of one collective or P2P op as its caller sees it: one promise per op,
 * settled straight from the completion callback (native.ts), with no wrapper promise and no
 * per-op closure. Small collectives back to back are bound by this per-op JS work (the
 * native side sleeps once per rank per op), so it allocates one object and one promise.
 */
import type { Stream } from '../device/stream.js';
import { StreamError } from '../errors.js';
import { withCallerStack, type CompletionWaiter, type NativeCommunicator } from '../native.js';

/** What a failed op reports to: its communicator. */
export interface OpOwner {
  readonly native: NativeCommunicator;
  readonly aborted: boolean;
  readonly rank: number;
}

const ignore = (): undefined => undefined;

// The executor of every OpCompletion's promise: one function, not a closure per op; the
// constructor takes the resolving functions it left here.
const made: { resolve: () => void; reject: (err: Error) => void } = { resolve: ignore, reject: ignore };
function fill(resolve: () => void, reject: (err: Error) => void): void {
  made.resolve = resolve;
  made.reject = reject;
}

export class OpCompletion implements CompletionWaiter {
  awaited = false;
  readonly promise: Promise<void>;
  private readonly resolve: () => void;
  private readonly reject: (err: Error) => void;

  /** `site`: an Error made at the caller's call, whose stack a failure reports. */
  constructor(
    private readonly owner: OpOwner,
    private readonly fn: string,
    private readonly stream: Stream,
    private readonly site: Error,
  ) {
    this.promise = new Promise<void>(fill);
    this.resolve = made.resolve;
    this.reject = made.reject;
  }

  settle(error: Error | undefined): void {
    if (error === undefined) {
      this.resolve();
      return;
    }
    // The promise may be ignored (NCCL style: enqueue, then stream.synchronize()): a handler
    // attached before the rejection keeps a failure from being an unhandled rejection, and
    // the stream still reports it. Only failures pay for it.
    void this.promise.catch(ignore);
    let err: Error;
    try {
      // Skipped because the stream already failed in a non-communicator op: peers would
      // wait for this rank until the exec timeout; abort them now instead. (The stream's
      // skip already did natively: Op::on_skip; this stays as a backstop.)
      const { owner } = this;
      if (error instanceof StreamError && !owner.aborted) {
        owner.native.abort(`rank ${owner.rank}'s stream ${this.stream.id} failed before its ${this.fn} could run: ${error.message}`);
      }
      err = withCallerStack(error, this.site);
    } catch (e) {
      err = e as Error;
    }
    this.reject(err);
  }
}
