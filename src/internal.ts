/**
 * `ascent/internal`: everything behind the public face (src/index.ts), for Ascent's own
 * tests, bench and tools. Not a stable API: names here may change or move without notice.
 * Applications import from 'ascent'.
 */
export * from './runtime/errors.js';
export { ENV_VARS, type EnvVarSpec, type EnvVarName, parseBytes } from './runtime/env.js';
export { World, type RankInfo, type RankStatus } from './runtime/actor-system/world.js';
export { ActorRef, type ActorMethods, type CallOpts } from './runtime/actor-system/actor-ref.js';
export { ActorMesh } from './runtime/actor-system/actor-mesh.js';
export type { RankContext, RankActors } from './runtime/actor-system/rank-context.js';
export type { Logger } from './runtime/logger.js';
export { TaskPool, type TaskSpec } from './runtime/actor-system/task-pool.js';
export type { WorldOptions, ActorSpec, CallOptions, LaunchOptions } from './runtime/config.js';
export { launch, type LaunchResult } from './runtime/actor-system/launcher.js';
export { registerPatch, listPatches, modelPatchesEnabled, setModelPatchesEnabled, patchImpl, type PatchSpec } from './runtime/patches.js';
export * from './runtime/device/device-index.js';
export * from './runtime/comm/comm-index.js';
export * from './model/index.js';
export * from './parallel/index.js';
export * from './train/index.js';
export * from './actors/index.js';
export * from './grpo/index.js';
export * from './rollout/index.js';
export * from './sync/index.js';
export * from './data/index.js';
export { PACKAGE_ROOT, builtFile } from './runtime/paths.js';
export { runMeta, gitInfo, ascentVersion, type RunMeta, type GitInfo } from './runtime/actor-system/run-meta.js';
