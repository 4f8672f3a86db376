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
 *
 * With entropyCoeff > 0 one kernel gives the log-probs and the exact entropies
 * (train/logprobs-entropy.ts), the seed covers both ([2·T]: d/dlogp ‖ d/dH), and the
 * bonus is aggregated with the policy loss's normalisation (entropy-bonus.ts).
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import { IGNORE_INDEX } from '../model/labels.js';
import { localTokens, targetTokens } from '../train/rows.js';
import type { LossFn, LossTerms, TrainBatch } from '../train/strategy.js';
import { targetLogprobs } from '../train/logprobs.js';
import { tokenLogprobsEntropy } from '../train/logprobs-entropy.js';
import { registerLoss } from '../train/loss-registry.js';
import type { TokenTermOptions } from './token-terms.js';
import { grpoObjective, type ObjectiveOptions } from './objective.js';
import { rolloutCorrection, type CorrectionMode } from './rollout-correction.js';
import { checkEntropyCoeff, entropyBonus } from './entropy-bonus.js';

export interface GrpoBatchData {
  /**
   * Old-policy log-probs of the target tokens [B·S] (aligned with targets; ignored where the
   * target is IGNORE_INDEX). Absent: the policy being trained IS the old policy (one update
   * per rollout), so the current log-probs are used as constants and every ratio is exactly 1
   * — TRL's shortcut, which saves the trainer a forward pass per step.
   */
  oldLogprobs?: Float32Array;
  /** Reference-policy log-probs [B·S]; needed when beta > 0. */
  refLogprobs?: Float32Array;
  /** One advantage per row [B]. */
  advantages: Float32Array;
  /** The engine's log-probs of the sampled tokens [B·S], for the rollout correction. */
  engineLogprobs?: Float32Array;
  /**
   * The batch the objective is normalised over when it is not the one this call trains on
   * (gradient accumulation: the micro-batches of one optimizer step share their mini-batch's
   * rows and response tokens).
   */
  norm?: { rows: number; tokens: number };
}

export interface GrpoLossOptions extends TokenTermOptions, Partial<Omit<ObjectiveOptions, 'epsilon' | 'epsilonHigh' | 'beta'>> {
  /** The sampling temperature (log-probs are taken under it, as the engine returned them). */
  temperature: number;
  /** Rollout-vs-trainer correction with data.engineLogprobs (rollout-correction.ts); absent: off. */
  rolloutCorrection?: { mode: CorrectionMode; cap: number };
  /** Entropy bonus: loss −= entropyCoeff · (exact entropy aggregated as the policy loss is); 0 or absent: off, and no entropy computed. */
  entropyCoeff?: number;
}

/**
 * Stats keys the loss reports (sums over response tokens; divide by `tokens`); the
 * mismatch* keys are the rollout-vs-trainer metrics (rollout-correction.ts), present when
 * engine log-probs were given; `entropy` (Σ of the exact per-token entropy) only when
 * entropyCoeff > 0.
 */
export const GRPO_STATS = [
  'tokens',
  'clipped',
  'clippedLow',
  'clippedHigh',
  'kl',
  'ratio',
  'logpSum',
  'mismatchAbsDiff',
  'mismatchK3',
  'isWeight',
  'isCorrected',
  'entropy',
] as const;

export function checkGrpoData(batch: TrainBatch, data: GrpoBatchData, opts: GrpoLossOptions): void {
  const n = batch.batch * batch.seqLen;
  if (data.oldLogprobs && data.oldLogprobs.length !== n)
    throw new InvalidArgumentError(`GRPO: oldLogprobs has ${data.oldLogprobs.length} entries; expected batch x seqLen = ${n}.`);
  if (data.advantages.length !== batch.batch)
    throw new InvalidArgumentError(`GRPO: advantages has ${data.advantages.length} entries; expected one per row (${batch.batch}).`);
  if (opts.beta > 0 && data.refLogprobs?.length !== n) {
    throw new InvalidArgumentError(
      `GRPO: beta = ${opts.beta} needs refLogprobs of batch x seqLen = ${n} entries (got ${data.refLogprobs?.length ?? 'none'}). HINT: set beta to 0 or compute reference log-probs.`,
    );
  }
  if (data.engineLogprobs && data.engineLogprobs.length !== n)
    throw new InvalidArgumentError(`GRPO: engineLogprobs has ${data.engineLogprobs.length} entries; expected batch x seqLen = ${n}.`);
  checkEntropyCoeff(opts.entropyCoeff ?? 0);
  if (opts.rolloutCorrection && !data.engineLogprobs) {
    throw new InvalidArgumentError(
      "GRPO: rolloutCorrection needs the engine's log-probs (data.engineLogprobs). HINT: pass the log-probs generate() returned, aligned to the targets.",
    );
  }
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
    const coeff = opts.entropyCoeff ?? 0;
    const logp = coeff > 0 ? tokenLogprobsEntropy(tape, logits, rows.targets, opts.temperature) : targetLogprobs(tape, logits, rows.targets, opts.temperature);
    const both = (await logp.value.toArray({ stream: tape.stream })) as Float32Array;
    const n = rows.targets.length;
    const host = coeff > 0 ? both.subarray(0, n) : both;
    const mask = Array.from(rows.targets, (t) => t !== IGNORE_INDEX);
    // The global [B·S] arrays read at this rank's trimmed width (rows.seqLen).
    const sl = (a: Float32Array) => localTokens(rows, a);
    const oldLogp = data.oldLogprobs ? sl(data.oldLogprobs) : host;
    const stats: Record<string, number> = {};
    let isWeights: Float64Array | undefined;
    if (data.engineLogprobs) {
      const c = rolloutCorrection(
        { rows: rows.rows, seqLen: rows.seqLen, mask, oldLogp, engineLogp: sl(data.engineLogprobs) },
        opts.rolloutCorrection?.mode ?? 'token_truncate',
        opts.rolloutCorrection?.cap ?? Infinity,
      );
      if (opts.rolloutCorrection) isWeights = c.weights;
      const m = c.metrics;
      Object.assign(stats, {
        mismatchAbsDiff: m.meanAbsDiff * m.tokens,
        mismatchK3: m.k3Kl * m.tokens,
        isWeight: m.meanWeight * m.tokens,
        isCorrected: m.correctedFraction * m.tokens,
      });
    }
    const res = grpoObjective(
      {
        rows: rows.rows,
        seqLen: rows.seqLen,
        mask,
        logp: host,
        oldLogp,
        ...(data.refLogprobs ? { refLogp: sl(data.refLogprobs) } : {}),
        ...(isWeights ? { isWeights } : {}),
        advantages: data.advantages.subarray(rows.row0, rows.row0 + rows.rows),
        globalRows: data.norm?.rows ?? global.batch,
        globalTokens: data.norm?.tokens ?? targetTokens(global),
      },
      o,
    );
    let logpSum = 0;
    for (let i = 0; i < n; i++) if (mask[i]) logpSum += host[i]!;
    const { tokens, clipped, clippedLow, clippedHigh, kl, ratio } = res.stats;
    const terms: LossTerms = {
      perToken: logp,
      weights: Float32Array.from(res.weights),
      value: res.value,
      stats: { tokens, clipped, clippedLow, clippedHigh, kl, ratio, logpSum, ...stats },
      // The router aux loss of this micro-batch weighs as its rows in the optimizer step (router-aux-step.ts).
      auxScale: global.batch / (data.norm?.rows ?? global.batch),
    };
    if (coeff > 0) {
      const bonus = entropyBonus(
        {
          rows: rows.rows,
          seqLen: rows.seqLen,
          mask,
          entropy: both.subarray(n),
          globalRows: data.norm?.rows ?? global.batch,
          globalTokens: data.norm?.tokens ?? targetTokens(global),
        },
        o,
        coeff,
      );
      const weights = new Float32Array(2 * n);
      weights.set(res.weights);
      weights.set(bonus.weights, n);
      let weighted = 0;
      for (let i = 0; i < n; i++) if (weights[i] !== 0 || weights[n + i] !== 0) weighted++;
      Object.assign(terms, { weights, value: terms.value! + bonus.value, tokens: weighted });
      terms.stats!.entropy = bonus.sum;
    }
    return terms;
  };
}

// The trainer actor's lossStep('grpo', ...) finds this loss by name (src/train/loss-registry.ts).
registerLoss('grpo', grpoLoss);
