/** Public API of the training layer (strategies and their contract), re-exported by src/index.ts. */
export * from './strategy.js';
export { checkBatch, localRows, targetTokens, crossEntropyLoss } from './rows.js';
export { tokenLogprobs, targetLogprobs, rowLogprobs, type RowLogprobs } from './logprobs.js';
export { registerLoss, lossByName, registeredLosses, type LossBuilder } from './loss-registry.js';
export { sumSquares, scaleInPlace, clipCoefficient } from './grad-norm.js';
export {
  saveCheckpoint,
  loadCheckpoint,
  latestCheckpoint,
  stepDirName,
  TRAIN_STATE_FILE,
  LATEST_FILE,
  CHECKPOINT_FORMAT,
  type SaveOptions,
  type LoadOptions,
  type LoadedCheckpoint,
  type TrainerStateFile,
} from './checkpoint.js';
export { TrainerConfigSchema, OptimizerConfigSchema, parseTrainerConfig, type TrainerConfig, type TrainerConfigInput } from './config.js';
export { createStrategy, modelConfigPath, readHfWeights, type StrategyContext } from './factory.js';
export * from './megatron/index.js';
export { SingleDeviceStrategy, type SingleLoraOptions } from './single.js';
export { Fsdp2Strategy, planLayout, type Fsdp2Options, type Fsdp2LoraOptions, type FlatLayout, type FlatUnit, type FlatParam } from './fsdp2/index.js';
export { exportHfModel, SAVE_DTYPES, type SaveDtype, type HfExportOptions } from './hf-export.js';
