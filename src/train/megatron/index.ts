/** Public API of the `megatron` strategy (re-exported by src/train/index.ts). */
export { MegatronStrategy, expertUnitName, type MegatronOptions, type MegatronLoraOptions } from './strategy.js';
export { MegatronModel, type MegatronParams, type ParallelLinearHook, type ExpertsHook, type ParallelMode } from './model.js';
export { MegatronLoraHook, interleaveParts } from './lora-hook.js';
export { loraShardSpecs, loraSlice, loraGather, loraLocalShape, type LoraShardSpec, type LoraSplit } from './lora-shards.js';
export {
  megatronSpecs,
  hfToMegatron,
  megatronToHf,
  interleaveQkv,
  splitQkv as splitQkvHost,
  tpSlice,
  tpGather,
  tpLocalShape,
  expertNames as megatronExpertNames,
  type MegatronSpec,
  type TpSplit,
} from './bridge.js';
export { checkParallelSizes, layoutName, type ParallelSizes } from './layout.js';
export { copyToTp, reduceFromTp, allToAllRows, PendingComms } from './comm-ops.js';
