/**
 * Public API of the model layer (host side): HF config, safetensors and sharded checkpoints,
 * parameter specs and expert layouts. Re-exported by src/index.ts.
 */
export {
  MODEL_TYPES,
  ROPE_TYPES,
  parseModelConfig,
  loadModelConfig,
  isMoeLayer,
  toHFConfig,
  type ModelType,
  type RopeType,
  type RopeConfig,
  type MoeConfig,
  type ModelConfig,
} from './config.js';
export { ropeTable, computeRopeTable, originalMaxPositions, type RopeSource } from './rope-scaling.js';
export type { RopeTable } from './kernels/rope.js';
export {
  SAFETENSORS_DTYPES,
  DEVICE_DTYPE,
  MAX_HEADER_BYTES,
  SafetensorsFile,
  parseSafetensorsHeader,
  buildSafetensorsHeader,
  writeSafetensors,
  safetensorsDTypeSize,
  isSafetensorsDType,
  tensorBytes,
  numelOf,
  type SafetensorsDType,
  type TensorInfo,
  type ParsedHeader,
  type TensorSource,
  type WriteOptions,
} from './safetensors.js';
export {
  INDEX_FILE,
  SINGLE_FILE,
  Checkpoint,
  parseShardedIndex,
  writeCheckpoint,
  type ShardedIndex,
  type CheckpointTensor,
  type ShardedWriteOptions,
} from './checkpoint.js';
export {
  EXPERT_LAYOUTS,
  paramSpecs,
  detectExpertLayout,
  convertExpertLayout,
  checkParamsAgainstConfig,
  initParams,
  initialParams,
  toHostTensors,
  fusedExpertNames,
  perExpertNames,
  type ExpertLayout,
  type ParamKind,
  type ParamSpec,
  type HostTensor,
} from './params.js';
export { Prng } from './prng.js';
export { Tape, Var, type TapeOptions } from './autograd.js';
export { ParamStore, type AdamWHyper, type HostParam } from './param-store.js';
export { Qwen3Model, uploadBatch, type Batch as ModelBatch } from './qwen3.js';
export * as kernels from './kernels/index.js';
export * as functional from './functional.js';
export {
  LORA_MODULES,
  LORA_MODULE_NAMES,
  LoraConfigSchema,
  parseLoraConfig,
  resolveLoraTargets,
  type LoraModule,
  type LoraConfig,
  type LoraConfigInput,
  type LoraTarget,
} from './lora-config.js';
export { LoraAdapters, LoraHooks, loraParamSpecs, loraStepSeed, type LoraParamSpec, type ParamLookup, type TensorLookup } from './lora.js';
export { dropoutMask as loraDropoutMask } from './lora-ops.js';
