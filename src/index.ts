/**
 * Ascent's public API: a deliberate list, kept small (test/public-api.test.ts holds the
 * expected names). Everything else is internal and reachable only through the
 * 'ascent/internal' subpath (src/internal.ts), for Ascent's own tests, bench and tools.
 */
// Errors: stable codes, rebuilt across ranks.
export {
  AscentError,
  InvalidArgumentError,
  ConfigError,
  DeviceOOMError,
  TimeoutError,
  StreamError,
  ActorDiedError,
  ActorTimeoutError,
  ActorAbortedError,
  RankFailedError,
  RemoteError,
  CollectiveMismatchError,
  CollectiveTimeoutError,
  CommAbortedError,
  P2PDeadlockError,
  CheckpointFormatError,
  WeightLayoutError,
  WeightSyncError,
  isAscentError,
  registerRemoteErrorClass,
} from './runtime/errors.js';

// World, actors, launch, task pool.
export { World } from './runtime/actor-system/world.js';
export { ActorRef } from './runtime/actor-system/actor-ref.js';
export { ActorMesh } from './runtime/actor-system/actor-mesh.js';
export type { RankContext, RankActors } from './runtime/actor-system/rank-context.js';
export type { Logger } from './runtime/logger.js';
export { TaskPool } from './runtime/actor-system/task-pool.js';
export type { WorldOptions, ActorSpec, CallOptions, LaunchOptions } from './runtime/config.js';
export { launch } from './runtime/actor-system/launcher.js';
export { ENV_VARS } from './runtime/env.js';

// Devices, streams, events, tensors and their ops; collectives.
export { Device, configureDevice } from './runtime/device/device.js';
export { Stream } from './runtime/device/stream.js';
export { Event } from './runtime/device/event.js';
export { Tensor } from './runtime/device/tensor.js';
export type { DType } from './runtime/device/dtype.js';
export { fill, arange, cast, add, mul, scale, axpy, permute, transpose, matmul, copy, copyPeer } from './runtime/device/ops.js';
export { Communicator, type ReduceOp } from './runtime/comm/comm.js';

// Device meshes, placements, DTensor.
export { DeviceMesh } from './parallel/device-mesh.js';
export { Shard, Replicate, Partial, type Placement } from './parallel/placement.js';
export { DTensor } from './parallel/dtensor.js';

// Model.
export { loadModelConfig, parseModelConfig, type ModelConfig } from './model/config.js';
export { Qwen3Model } from './model/qwen3.js';
export { SupervisedTrainer, cosineLr } from './grpo/sft.js';
export * as syntheticTask from './data/synthetic-task.js';
export { LoraConfigSchema } from './model/lora-config.js';

// Training: strategies, trainer actor, losses, checkpoints.
export type { TrainStrategy, TrainBatch, LossFn } from './train/strategy.js';
export { createStrategy } from './train/factory.js';
export { SingleDeviceStrategy } from './train/single.js';
export { Fsdp2Strategy } from './train/fsdp2/index.js';
export { MegatronStrategy } from './train/megatron/index.js';
export { TrainerConfigSchema, OptimizerConfigSchema, type TrainerConfig, type TrainerConfigInput } from './train/config.js';
export { registerLoss } from './train/loss-registry.js';
export { saveCheckpoint, loadCheckpoint, latestCheckpoint } from './train/checkpoint.js';
export { TrainerActor } from './actors/trainer.js';
export { trainerActorSpec } from './actors/index.js';

// Rollout and weight sync.
export { RolloutEngine } from './rollout/engine.js';
export type { SamplingParams } from './rollout/sampling-params.js';
export { RolloutActor } from './actors/rollout.js';
export { ColocateSync } from './sync/colocate.js';
export { ServerSync } from './sync/server.js';
export type { SyncReport } from './sync/report.js';
export type { VerifyOptions } from './sync/verify.js';
export { SyncActor } from './actors/sync.js';

// GRPO.
export { runGrpo } from './grpo/driver.js';
export { checkGrpoArgs, grpoMain } from './grpo/cli.js';
export { GrpoConfigSchema, parseGrpoConfig, type GrpoConfig, type GrpoConfigInput } from './grpo/config.js';
export { readRunLog } from './grpo/run-log.js';
