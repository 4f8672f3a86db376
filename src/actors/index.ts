/**
 * The per-rank actors (trainer; rollout worker and weight-sync coordinator follow) and
 * the spawn specs that start them from built JavaScript, re-exported by src/index.ts.
 */
import type { ActorSpec } from '../runtime/config.js';
import { builtFile } from '../runtime/paths.js';
import type { TrainerConfigInput } from '../train/config.js';

export { TrainerActor, type TrainStepResult } from './trainer.js';
export { RolloutActor, type RolloutActorOptions } from './rollout.js';
export { SyncActor, makeWeightSync, type SyncCallOptions, type WeightSyncSetup } from './sync.js';

/** Spawn spec of the trainer actor on `ranks` (default every rank) with `config`. */
export function trainerActorSpec(config: TrainerConfigInput, ranks?: number[]): ActorSpec {
  return { module: builtFile('actors/trainer.js'), export: 'TrainerActor', name: 'trainer', args: [config, ranks ?? null], ...(ranks ? { ranks } : {}) };
}
