/**
 * Public API of the rollout engine (vLLM-like inference per rank, tensor parallel):
 * the engine, its weight sessions, its packed runtime parameters and layout states, the
 * checkpoint loader's plan, sampling parameters. Re-exported by src/index.ts.
 */
export { RolloutEngine, type RolloutEngineOptions, type GenerateResult } from './engine.js';
export type { ReloadSession, DirectSession } from './weight-session.js';
export { runtimeParamSpecs, runtimeChecksum, type RuntimeParamSpec, type LayoutState, type WriteLayout } from './runtime-params.js';
export { hfLoadPlan, type WeightSource } from './loader.js';
export { checkEngineDtype, runtimeDtypeOf, hfDtypeOf, ENGINE_DTYPES, type EngineDtype } from './weight-dtype.js';
export { tpShard, type TpShard } from './tp-shard.js';
export { logprobTemperature, type SamplingParams } from './sampling-params.js';
export type { SleepLevel } from './sleep.js';
export { hfDirectWrites, expertDirectWrite, slotWrite, expertSlotWrite, type DirectWrite } from './direct-write.js';
export { weightSlots, groupSlots, checkSlot, type SlotDescriptor, type SlotRegion, type SlotTransform } from './weight-slots.js';
export { applyEngineAdapters, markEngineBaseWeights, releaseEngineLora, type EngineAdapter } from './lora.js';
