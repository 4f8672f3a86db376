/**
 * GRPO's clipped-surrogate loss as a trainer LossFn (src/train/strategy.ts).
 *
 * The objective and its variants (loss type, sequence-level ratios, two-sided clipping,
 * KL estimator, rollout-correction weights) are objective.ts; the default is DAPO's token
 * mean over the GLOBAL batch, so every data-parallel layout gives the same gradient.
 *
 * How the gradient is formed: the current log-probs are computed on the tape
 * (train/logprobs.ts), read once on the host, and the per-token derivative of the
 * objective with respect to each log-prob becomes the backward seed. One host read of
 * T floats per micro-batch; the gradient is exact (not an approximation).
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import { IGNORE_INDEX } from '../model/synthetic-task.js';
import { targetTokens } from '../train/rows.js';
import type { LossFn, TrainBatch } from '../train/strategy.js';
import { targetLogprobs } from '../train/logprobs.js';
import { registerLoss } from '../train/loss-registry.js';
import type { TokenTermOptions } from './token-terms.js';
import { grpoObjective, type ObjectiveOptions } from './objective.js';

export interface GrpoBatchData {
  /** Sampling log-probs of the target tokens [B·S] (aligned with targets; ignored where the target is IGNORE_INDEX). */
  oldLogprobs: Float32Array;
  /** Reference-policy log-probs [B·S]; needed when beta > 0. */
  refLogprobs?: Float32Array;
  /** One advantage per row [B]. */
  advantages: Float32Array;
  /** Rollout-correction weights [B·S] (rollout-correction.ts); absent: 1. */
  isWeights?: Float32Array;
}

export interface GrpoLossOptions extends TokenTermOptions, Partial<Omit<ObjectiveOptions, 'epsilon' | 'epsilonHigh' | 'beta'>> {
  /** The sampling temperature (log-probs are taken under it, as the engine returned them). */
  temperature: number;
}

/** Stats keys the loss reports (sums over response tokens; divide by `tokens`). */
export const GRPO_STATS = ['tokens', 'clipped', 'clippedLow', 'clippedHigh', 'kl', 'ratio', 'logpSum'] as const;

export function checkGrpoData(batch: TrainBatch, data: GrpoBatchData, opts: GrpoLossOptions): void {
  const n = batch.batch * batch.seqLen;
  if (data.oldLogprobs.length !== n) throw new InvalidArgumentError(`GRPO: oldLogprobs has ${data.oldLogprobs.length} entries; expected batch x seqLen = ${n}.`);
  if (data.advantages.length !== batch.batch) throw new InvalidArgumentError(`GRPO: advantages has ${data.advantages.length} entries; expected one per row (${batch.batch}).`);
  if (opts.beta > 0 && data.refLogprobs?.length !== n) {
    throw new InvalidArgumentError(`GRPO: beta = ${opts.beta} needs refLogprobs of batch x seqLen = ${n} entries (got ${data.refLogprobs?.length ?? 'none'}). HINT: set beta to 0 or compute reference log-probs.`);
  }
  if (data.isWeights && data.isWeights.length !== n) throw new InvalidArgumentError(`GRPO: isWeights has ${data.isWeights.length} entries; expected batch x seqLen = ${n}.`);
}

/** The objective options a loss call resolves to (defaults: today's DAPO token mean, token-level ratios, k3). */
export function objectiveOptions(opts: GrpoLossOptions): ObjectiveOptions {
  return {
    lossType: opts.lossType ?? 'dapo',
    epsilon: opts.clipLow,
    epsilonHigh: opts.clipHigh,
    delta: opts.delta ?? null,
    importanceSamplingLevel: opts.importanceSamplingLevel ?? 'token',
    beta: opts.beta,
    klEstimator: opts.klEstimator ?? 'k3',
    maxCompletionLength: opts.maxCompletionLength ?? 1,
  };
}

export function grpoLoss(data: GrpoBatchData, opts: GrpoLossOptions): LossFn {
  const o = objectiveOptions(opts);
  return async (tape, logits, rows, global) => {
    checkGrpoData(global, data, opts);
    const logp = targetLogprobs(tape, logits, rows.targets, opts.temperature);
    const host = (await logp.value.toArray({ stream: tape.stream })) as Float32Array;
    const base = rows.row0 * rows.seqLen, n = host.length;
    const mask = Array.from(rows.targets, (t) => t !== IGNORE_INDEX);
    const sl = (a: Float32Array) => a.subarray(base, base + n);
    const res = grpoObjective({
      rows: rows.rows, seqLen: rows.seqLen, mask, logp: host, oldLogp: sl(data.oldLogprobs),
      ...(data.refLogprobs ? { refLogp: sl(data.refLogprobs) } : {}),
      ...(data.isWeights ? { isWeights: sl(data.isWeights) } : {}),
      advantages: data.advantages.subarray(rows.row0, rows.row0 + rows.rows),
      globalRows: global.batch, globalTokens: targetTokens(global),
    }, o);
    let logpSum = 0;
    for (let i = 0; i < n; i++) if (mask[i]) logpSum += host[i]!;
    const { tokens, clipped, clippedLow, clippedHigh, kl, ratio } = res.stats;
    return { perToken: logp, weights: Float32Array.from(res.weights), value: res.value, stats: { tokens, clipped, clippedLow, clippedHigh, kl, ratio, logpSum } };
  };
}

// The trainer actor's lossStep('grpo', ...) finds this loss by name (src/train/loss-registry.ts).
registerLoss('grpo', grpoLoss);
