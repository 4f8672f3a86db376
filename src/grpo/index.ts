/** Public API of the GRPO layer, re-exported by src/index.ts. */
export { groupAdvantages, type AdvantageOptions } from './advantages.js';
export { tokenTerms, type TokenTermOptions, type TokenTerms } from './token-terms.js';
export { grpoLoss, checkGrpoData, GRPO_STATS, type GrpoBatchData, type GrpoLossOptions } from './loss.js';
export { GrpoConfigSchema, parseGrpoConfig, type GrpoConfig, type GrpoConfigInput } from './config.js';
export { Progress, summaryTable, stepLine, lengthStats, PHASES, type StepMetrics, type Phase } from './metrics.js';
export {
  RunLog,
  readRunLog,
  runLogMode,
  checkRunLogTarget,
  RUN_LOG_FORMAT,
  type RunLogHeader,
  type RunLogRecord,
  type RunLogMode,
  type RunLogContents,
} from './run-log.js';
export { buildTrainBatch, alignToTargets, assembleRows, type Sequences } from './rollout-batch.js';
export { runGrpo, type GrpoSummary } from './driver.js';
export { checkGrpoArgs, grpoMain, grpoConfigFromArgs } from './cli.js';
export { SupervisedTrainer, cosineLr, type StepResult } from './sft.js';
