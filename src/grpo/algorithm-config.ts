/**
 * The GRPO algorithm's keys of the run config (spread into GrpoConfigSchema), named as
 * TRL's GRPOConfig names them in camelCase (the snake_case spellings are aliases):
 * updates per rollout, loss type and normalisation, reward scaling, two-sided clipping,
 * sequence-level ratios (GSPO), the KL estimator and where KL goes, reference refresh,
 * rollout-vs-trainer correction, the entropy bonus, dynamic sampling and the learning-rate schedule.
 */
import { z } from 'zod';
import { ConfigError } from '../runtime/errors.js';
import { LR_SCHEDULES } from '../train/lr-schedule.js';
import { IS_LEVELS, KL_ESTIMATORS, LOSS_TYPES } from './objective.js';
import { CORRECTION_MODES } from './rollout-correction.js';

const posInt = (what: string) =>
  z
    .number({ error: `expected ${what} as a number` })
    .int(`expected an integer for ${what}`)
    .positive(`expected a positive integer for ${what}`);
const oneOf = <T extends readonly [string, ...string[]]>(what: string, values: T) =>
  z.enum(values, { error: `expected ${what} to be one of ${values.join(', ')}` });

export const ALGORITHM_SHAPE = {
  /** μ: optimizer passes over each rollout (TRL num_iterations, verl ppo_epochs). */
  numIterations: posInt('numIterations').default(1),
  /** Optimizer steps (mini-batches) per rollout (TRL steps_per_generation). */
  stepsPerGeneration: posInt('stepsPerGeneration').default(1),
  /** Micro-batches accumulated into one optimizer step. */
  gradientAccumulationSteps: posInt('gradientAccumulationSteps').default(1),
  /** grpo: per-sequence mean; bnpo: local token mean; dr_grpo: / (B · maxNewTokens); dapo: global token mean. */
  lossType: oneOf('lossType', LOSS_TYPES).default('dapo'),
  /** Advantage scaling: the group's std, the batch's std, or none (Dr. GRPO). */
  scaleRewards: oneOf('scaleRewards', ['group', 'batch', 'none'] as const).default('group'),
  /** Two-sided clipping: the unclipped ratio is capped at delta (> 1 + clipHigh); null: off. */
  delta: z.number().gt(1, 'expected delta > 1 (or null)').nullable().default(null),
  /** token: one ratio per token; sequence: the length-normalised sequence ratio (GSPO). */
  importanceSamplingLevel: oneOf('importanceSamplingLevel', IS_LEVELS).default('token'),
  klEstimator: oneOf('klEstimator', KL_ESTIMATORS).default('k3'),
  /**
   * Entropy bonus (verl actor.entropy_coeff): loss = policy loss − entropyCoeff · the exact entropy of the
   * trainer's softmax, aggregated as lossType aggregates the policy loss. 0: off (no entropy computed).
   */
  entropyCoeff: z.number({ error: 'expected entropyCoeff as a number' }).min(0, 'expected entropyCoeff >= 0 (0 turns the entropy bonus off)').default(0),
  /** KL as a penalty on the reward (β · Σ_t k1 per sample, verl use_kl_in_reward) instead of a loss term. */
  klInReward: z.boolean().default(false),
  /** Refresh the reference every refModelSyncSteps steps: ref ← α·policy + (1 − α)·ref (TRL sync_ref_model). */
  syncRefModel: z.boolean().default(false),
  refModelSyncSteps: posInt('refModelSyncSteps').default(512),
  refModelMixupAlpha: z.number().gt(0).max(1, 'expected refModelMixupAlpha in (0, 1]').default(0.6),
  /** Rollout-vs-trainer mismatch correction with the engine's log-probs (off by default; metrics are always logged). */
  rolloutCorrection: z
    .object({
      mode: oneOf('rolloutCorrection.mode', CORRECTION_MODES).default('token_truncate'),
      cap: z.number().min(1, 'expected rolloutCorrection.cap >= 1').default(2),
    })
    .strict()
    .optional(),
  /** DAPO dynamic sampling: train only on groups whose rewards differ; sample up to maxRounds extra rounds of prompts to refill the batch. */
  dynamicSampling: z
    .object({ maxRounds: z.number().int().min(0, 'expected dynamicSampling.maxRounds >= 0').default(2) })
    .strict()
    .optional(),
  lrScheduler: z
    .object({
      type: oneOf('lrScheduler.type', LR_SCHEDULES).default('constant'),
      warmupSteps: z.number().int().min(0).optional(),
      warmupRatio: z.number().min(0).lt(1, 'expected lrScheduler.warmupRatio in [0, 1)').optional(),
      minLr: z.number().min(0).optional(),
    })
    .strict()
    .default({ type: 'constant' }),
};

export interface AlgorithmConfig {
  numIterations: number;
  stepsPerGeneration: number;
  gradientAccumulationSteps: number;
  lrScheduler: { type: (typeof LR_SCHEDULES)[number]; warmupSteps?: number | undefined; warmupRatio?: number | undefined; minLr?: number | undefined };
  delta: number | null;
  clipHigh: number;
  steps: number;
  optimizer: { lr: number };
}

/** Cross-field checks of the algorithm keys. */
export function checkAlgorithmConfig(c: AlgorithmConfig): void {
  if (c.delta !== null && !(c.delta > 1 + c.clipHigh)) {
    throw new ConfigError(`GRPO: delta (${c.delta}) must be greater than 1 + clipHigh = ${1 + c.clipHigh}, or null.`, { delta: c.delta });
  }
  const s = c.lrScheduler;
  if (s.warmupSteps !== undefined && s.warmupRatio !== undefined)
    throw new ConfigError('GRPO: give lrScheduler.warmupSteps or lrScheduler.warmupRatio, not both.');
  if (s.minLr !== undefined && s.minLr > c.optimizer.lr)
    throw new ConfigError(`GRPO: lrScheduler.minLr (${s.minLr}) is above the learning rate (${c.optimizer.lr}).`);
  const total = totalOptimizerSteps(c);
  const warm = warmupSteps(c);
  if (s.type !== 'constant' && warm >= total) {
    throw new ConfigError(
      `GRPO: ${warm} warm-up steps leave no room for the '${s.type}' decay over ${total} optimizer steps. HINT: lower lrScheduler.warmupSteps / warmupRatio.`,
    );
  }
}

/** Optimizer steps of the whole run: steps × stepsPerGeneration × numIterations. */
export function totalOptimizerSteps(c: Pick<AlgorithmConfig, 'steps' | 'stepsPerGeneration' | 'numIterations'>): number {
  return c.steps * c.stepsPerGeneration * c.numIterations;
}

export function warmupSteps(c: Pick<AlgorithmConfig, 'steps' | 'stepsPerGeneration' | 'numIterations' | 'lrScheduler'>): number {
  const s = c.lrScheduler;
  return s.warmupSteps ?? Math.floor((s.warmupRatio ?? 0) * totalOptimizerSteps(c));
}
