/**
 * The last optimizer step of a GRPO update and the trainer rank's side of the step's weight
 * sync in one actor call. Two calls per trainer rank (lossSteps, then sync) put a controller
 * turn between them: every trainer rank's reply reaches rank 0, which then sends every
 * trainer rank the sync call; on 2 cores shared by 16 ranks each hop is a thread wake-up on
 * the step's critical path. Here each trainer rank starts its side of the sync as soon as its
 * own update finished, and the controller makes one call per rank. Colocated, the rank also
 * wakes its own sleeping engine first (the wake was a third call per rank), as a hybrid
 * engine switches from training to rollout inside the worker.
 * The order on the rank is the same as with separate calls (the optimizer step, the wake,
 * then the sync, which waits for the optimizer's writes before reading the weights).
 */
import type { TrainerActor, TrainStepResult } from '../actors/trainer.js';
import type { SyncActor, SyncCallOptions } from '../actors/sync.js';
import type { RolloutActor } from '../actors/rollout.js';
import type { SyncReport } from '../sync/index.js';
import { InvalidStateError } from '../runtime/errors.js';

export interface UpdateSyncResult {
  step: TrainStepResult;
  sync: SyncReport;
  /** When this rank's update finished and its side of the sync began: epoch ms (performance.timeOrigin + now()). */
  trainEndMs: number;
}

/** Now as epoch ms, comparable between the threads (and processes) of one host. */
export const epochMs = (): number => performance.timeOrigin + performance.now();

/**
 * How much of the controller's update phase, which ended at `lapEndMs` (epoch ms) and lasted
 * `trainSeconds`, was the weight sync: the time since the LAST trainer rank finished its update
 * (`trainEndMs`, one per rank). Until then the step is still training: ranks that finished early
 * wait in the sync's collective for the slowest one's update (with two calls, the controller
 * would only have started the sync then). A value the clocks cannot vouch for (a rank's time
 * after the phase ended, or before it began: clocks of different hosts) falls back to
 * `rankZeroSyncSeconds`, rank 0's own side, which is what was booked before.
 */
export function syncInUpdate(trainEndMs: readonly number[], lapEndMs: number, trainSeconds: number, rankZeroSyncSeconds: number): number {
  const last = Math.max(...trainEndMs);
  const s = (lapEndMs - last) / 1000;
  if (!Number.isFinite(s) || s < 0 || s > trainSeconds) return Math.min(rankZeroSyncSeconds, trainSeconds);
  return s;
}

export class UpdateSyncActor {
  constructor(
    private readonly trainer: TrainerActor,
    private readonly syncer: SyncActor,
    /** This rank's engine when it is colocated with the trainer (woken before the sync on request). */
    private readonly rollout: RolloutActor | null = null,
  ) {}

  /**
   * trainer.lossSteps(name, micro, opts), then (when it succeeded) sync.sync(syncOpts) on this
   * rank; with `wake`, this rank's colocated engine is woken between the two.
   */
  async lossStepsThenSync(
    name: string,
    micro: Parameters<TrainerActor['lossSteps']>[1],
    opts: Parameters<TrainerActor['lossSteps']>[2],
    syncOpts: SyncCallOptions,
    wake = false,
  ): Promise<UpdateSyncResult> {
    const step = await this.trainer.lossSteps(name, micro, opts);
    const trainEndMs = epochMs();
    if (wake) {
      if (!this.rollout) throw new InvalidStateError('lossStepsThenSync(wake): this rank has no colocated engine to wake. HINT: wake only in colocate mode.');
      this.rollout.wake();
    }
    return { step, sync: await this.syncer.sync(syncOpts), trainEndMs };
  }
}
