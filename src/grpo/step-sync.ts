/**
 * The weight sync of one GRPO step, as the controller issues it. In server mode the
 * engine-only ranks are idle while the trainers update the policy, so they enter the sync
 * before the update (`begin`): their side of it (planning the receive, setting up the
 * engine's reload session) runs while the trainers train, and they wait for the trainers'
 * data in the sync's collective, which blocks without using a core. After the update the
 * trainer ranks join (`finish`), so the sync on the step's critical path is the trainers'
 * side and the transfer. Colocated ranks train and serve on the same rank: there every
 * rank is called after the update, as before.
 *
 * The engines wait in a collective the trainers have not joined yet, so a controller that
 * fails in between must release them: `cancel` aborts the sync communicator (every rank of
 * the run), and the engines' calls fail at once naming why, instead of at the deadline.
 */
import type { ActorMesh } from '../runtime/actor-system/actor-mesh.js';
import { InvalidStateError } from '../runtime/errors.js';
import type { SyncActor, SyncCallOptions } from '../actors/sync.js';
import type { SyncReport } from '../sync/index.js';

interface Pending {
  opts: SyncCallOptions;
  calls: Promise<SyncReport[]>;
  failure: Error | null;
}

export class StepSync {
  /** Ranks that only serve (server mode): called by begin(). */
  readonly early: number[];
  /** Ranks called by finish(): the trainer ranks (every rank when colocated). */
  readonly late: number[];
  #pending: Pending | null = null;

  constructor(
    private readonly syncs: ActorMesh<SyncActor>,
    trainerRanks: readonly number[],
    /** Aborts the sync communicator for every rank (cancel). */
    private readonly abort: (reason: string) => void,
    private readonly timeoutMs: number,
  ) {
    this.early = syncs.ranks.filter((r) => !trainerRanks.includes(r));
    this.late = syncs.ranks.filter((r) => trainerRanks.includes(r));
    if (!this.late.includes(0))
      throw new InvalidStateError(`StepSync: rank 0 (the controller) must be a trainer rank, but the trainer ranks are [${trainerRanks.join(', ')}].`);
  }

  /** Whether engine ranks are inside a sync the trainer ranks have not joined yet. */
  get pending(): boolean {
    return this.#pending !== null;
  }

  /** Server mode: the engine-only ranks enter the sync now (no-op when every rank trains). */
  begin(opts: SyncCallOptions): void {
    if (this.#pending)
      throw new InvalidStateError("StepSync.begin(): the engines are already in a sync. HINT: finish() (or cancel()) the step's sync before the next one.");
    if (this.early.length === 0) return;
    const calls = Promise.all(this.early.map((r) => this.syncs.ref(r).invoke('sync', [opts], { timeoutMs: this.timeoutMs })));
    const p: Pending = { opts, calls, failure: null };
    // Seen now (no unhandled rejection while the trainers train), reported by finish().
    calls.catch((e: Error) => (p.failure = e));
    this.#pending = p;
  }

  /**
   * The trainer ranks join (with the options begin() got, when it ran); resolves to rank
   * 0's report once every rank finished. An engine rank that already failed fails the sync
   * without calling the trainers (the engine side aborted the communicator: they would
   * fail on it too, with a less direct message). `joined`: the trainer ranks are already
   * in the sync (update-sync.ts: their last optimizer step's call syncs too), resolving to
   * rank 0's report; nothing more is called.
   */
  async finish(opts: SyncCallOptions, joined?: Promise<SyncReport>): Promise<SyncReport> {
    const p = this.#pending;
    this.#pending = null;
    if (p?.failure && !joined) throw p.failure;
    const late =
      joined ??
      Promise.all(this.late.map((r) => this.syncs.ref(r).invoke('sync', [p?.opts ?? opts], { timeoutMs: this.timeoutMs }))).then(
        (reports) => reports[this.late.indexOf(0)]!,
      );
    // An engine failure is the cause when both fail (the trainers then fail on the aborted communicator).
    const [report] = await Promise.all([late, p?.calls]).catch((e: Error) => {
      throw p?.failure ?? e;
    });
    return report;
  }

  /** The step failed before finish(): engines waiting in the sync fail now, with `reason`. */
  cancel(reason: string): void {
    if (!this.#pending) return;
    this.#pending = null;
    this.abort(reason);
  }
}
