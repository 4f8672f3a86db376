/**
 * The weight-sync-coordinator actor: one per rank (trainer, engine or both), wrapping
 * the mode's coordinator (src/sync: ColocateSync or ServerSync). `sync()` is
 * collective over every rank of the run: the controller calls it on all ranks.
 */
import type { Communicator } from '../runtime/comm/comm.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import type { RankContext } from '../runtime/actor-system/rank-context.js';
import type { ModelConfig } from '../model/config.js';
import type { RolloutEngine } from '../rollout/index.js';
import type { TrainStrategy } from '../train/strategy.js';
import { ColocateSync, ServerSync, type SyncReport, type VerifyOptions } from '../sync/index.js';

export interface SyncCallOptions {
  /** Exact per-tensor fingerprints on every engine rank (full syncs), plus probe-batch log-prob parity when a probe is given; false to skip. */
  verify: false | VerifyOptions;
  /** Send only LoRA adapters. */
  adapterOnly?: boolean;
}

interface Coordinator {
  release?(): void;
  sync(opts?: { adapterOnly?: boolean; verify?: VerifyOptions }): Promise<SyncReport>;
}

export interface WeightSyncSetup {
  /** Only the sync section is read (a GRPO config fits as it is). */
  cfg: { sync: { bucketBytes: number } };
  model: ModelConfig;
  mode: 'server' | 'colocate';
  roles: { trainerRanks: number[]; isTrainer: boolean; isEngine: boolean };
  strategy: TrainStrategy | null;
  engine: RolloutEngine | null;
  /** Server mode: the dedicated communicator over every rank (trainers first). */
  syncComm: Communicator | null;
}

export function makeWeightSync(s: WeightSyncSetup): Coordinator {
  const bucketBytes = s.cfg.sync.bucketBytes;
  if (s.mode === 'colocate') {
    if (!s.strategy || !s.engine) throw new InvalidArgumentError('colocate weight sync needs a trainer strategy and an engine on every rank.');
    return new ColocateSync({ strategy: s.strategy, engine: s.engine, bucketBytes });
  }
  if (!s.syncComm) throw new InvalidArgumentError('server weight sync needs the sync communicator.');
  return ServerSync.create({
    comm: s.syncComm,
    role: s.roles.isTrainer ? 'trainer' : 'engine',
    trainerRanks: s.roles.trainerRanks.length,
    cfg: s.model,
    ...(s.strategy ? { strategy: s.strategy } : {}),
    ...(s.engine ? { engine: s.engine } : {}),
    bucketBytes,
  });
}

export class SyncActor {
  constructor(
    private readonly ctx: RankContext,
    private readonly coordinator: Coordinator,
  ) {}

  /** Frees the coordinator's communicators and buffers (local; every rank calls it when the run ends). */
  release(): void {
    this.coordinator.release?.();
  }

  sync(opts: SyncCallOptions): Promise<SyncReport> {
    return this.coordinator.sync({ ...(opts.adapterOnly ? { adapterOnly: true } : {}), ...(opts.verify ? { verify: opts.verify } : {}) });
  }
}
