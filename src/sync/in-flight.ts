/**
 * A server-mode trainer rank's transfers still in flight after its sync() returned.
 *
 * A trainer rank's side of a full sync ends once every transfer is enqueued (on the sync's
 * stream); the default stream, where the optimizer writes the weights, waits for them (an
 * event recorded after the transfers), and the engine ranks' sync() resolves when the
 * weights are loaded there. Waiting for the transfers' completion on the trainer rank too
 * put a thread wake-up and the trainer's reply on the step's critical path: on 2 cores
 * shared by 16 ranks, ~0.5 ms of a ~6 ms sync.
 *
 * What the transfers read (the staging buffer, wire casts) is released when they complete.
 * A transfer that fails is reported by the engine ranks' sync() (the collective fails on
 * every rank), by this rank's next use of its default stream (its wait on the transfers fails),
 * and by the next drain(): the next sync() drains first, so it never starts over the
 * previous one's failure.
 */
import type { Tensor } from '../runtime/device/device-index.js';
import { WeightSyncError } from '../runtime/errors.js';

export class InFlight {
  #done: Promise<void> | null = null;
  #failure: Error | null = null;

  /** Whether transfers of an earlier sync may still be running. */
  get pending(): boolean {
    return this.#done !== null;
  }

  /**
   * Takes over `transfers` (each resolves when its collective completed; every collective
   * has the communicator's deadline) and the buffers they read, released once all settled.
   */
  hand(transfers: readonly Promise<void>[], owned: ReadonlyArray<Tensor | null>): void {
    if (this.#done) throw new WeightSyncError('InFlight.hand(): the previous transfers were not drained. HINT: await drain() before the next sync.', {});
    this.#done = Promise.allSettled(transfers).then((outcomes) => {
      const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected');
      if (failed) this.#failure = failed.reason as Error;
      for (const t of owned) t?.release();
    });
  }

  /** Resolves once the handed transfers completed; throws when one of them failed (once). */
  async drain(): Promise<void> {
    const done = this.#done;
    if (done) await done;
    if (this.#done === done) this.#done = null;
    const failure = this.#failure;
    this.#failure = null;
    if (failure) {
      throw new WeightSyncError(
        `ServerSync: the previous sync's transfers from this trainer rank failed after it returned: ${failure.message} HINT: the engine ranks' sync reported it too; fix that failure and start a new run (or resume from a checkpoint).`,
        { cause: failure.message },
      );
    }
  }
}
