/**
 * Rollout-vs-trainer mismatch correction (TRL's vllm_importance_sampling_correction,
 * ms-swift's rollout_importance_sampling_mode, verl's rollout correction): the engine
 * sampled with its own log-probs (`engineLogp`) while the loss assumes the trainer's
 * old policy (`oldLogp`); the importance weight of a token is ρ = exp(old − engine), of a
 * sequence the product over its response tokens, exp(Σ (old − engine)). Modes:
 *
 *   'token_truncate'    w_t = min(ρ_t, cap)                       (TIS)
 *   'token_mask'        w_t = ρ_t when ρ_t ≤ cap, else 0          (MIS: the token is dropped)
 *   'sequence_truncate' w_t = min(ρ_seq, cap) for every token of the row
 *   'sequence_mask'     w_t = ρ_seq when ρ_seq ≤ cap, else 0
 *
 * Weights multiply the policy-gradient term as constants (no gradient flows through
 * them). When engine and trainer agree, every ρ is 1 and so is every weight. The metrics
 * (means over response tokens) say how far the two policies are apart.
 */
import { InvalidArgumentError } from '../runtime/errors.js';

export const CORRECTION_MODES = ['token_truncate', 'token_mask', 'sequence_truncate', 'sequence_mask'] as const;
export type CorrectionMode = (typeof CORRECTION_MODES)[number];

export interface CorrectionInput {
  rows: number;
  seqLen: number;
  mask: ArrayLike<boolean | number>;
  oldLogp: ArrayLike<number>;
  engineLogp: ArrayLike<number>;
}

export interface MismatchMetrics {
  tokens: number;
  /** Mean |old − engine| over response tokens. */
  meanAbsDiff: number;
  /** Largest |old − engine|. */
  maxAbsDiff: number;
  /** Mean k3 estimate of KL(engine ‖ trainer) per token. */
  k3Kl: number;
  /** Mean weight after correction. */
  meanWeight: number;
  /** Fraction of response tokens whose weight was capped (truncate) or zeroed (mask). */
  correctedFraction: number;
}

export function rolloutCorrection(inp: CorrectionInput, mode: CorrectionMode, cap: number): { weights: Float64Array; metrics: MismatchMetrics } {
  if (!CORRECTION_MODES.includes(mode))
    throw new InvalidArgumentError(`rollout correction: mode must be one of ${CORRECTION_MODES.join(', ')} but is ${JSON.stringify(mode)}.`, {
      option: 'mode',
    });
  if (!(cap >= 1)) throw new InvalidArgumentError(`rollout correction: cap must be at least 1 but is ${cap}.`, { option: 'cap' });
  const n = inp.rows * inp.seqLen;
  if (inp.mask.length !== n || inp.oldLogp.length !== n || inp.engineLogp.length !== n) {
    throw new InvalidArgumentError(`rollout correction: mask, oldLogp and engineLogp must each have rows x seqLen = ${n} entries.`);
  }
  const weights = new Float64Array(n);
  let tokens = 0,
    sumAbs = 0,
    maxAbs = 0,
    k3 = 0,
    sumW = 0,
    corrected = 0;
  const seqLevel = mode.startsWith('sequence');
  const truncate = mode.endsWith('truncate');
  const apply = (rho: number) => (truncate ? Math.min(rho, cap) : rho <= cap ? rho : 0);
  for (let r = 0; r < inp.rows; r++) {
    const base = r * inp.seqLen;
    let logSum = 0;
    for (let t = 0; t < inp.seqLen; t++) {
      const i = base + t;
      if (!inp.mask[i]) continue;
      const d = inp.oldLogp[i]! - inp.engineLogp[i]!;
      logSum += d;
      tokens++;
      sumAbs += Math.abs(d);
      maxAbs = Math.max(maxAbs, Math.abs(d));
      k3 += Math.exp(d) - d - 1;
    }
    const seqW = apply(Math.exp(logSum));
    for (let t = 0; t < inp.seqLen; t++) {
      const i = base + t;
      if (!inp.mask[i]) continue;
      const rho = seqLevel ? Math.exp(logSum) : Math.exp(inp.oldLogp[i]! - inp.engineLogp[i]!);
      const w = seqLevel ? seqW : apply(rho);
      weights[i] = w;
      sumW += w;
      if (w !== rho) corrected++;
    }
  }
  const per = (x: number) => (tokens ? x / tokens : 0);
  return {
    weights,
    metrics: { tokens, meanAbsDiff: per(sumAbs), maxAbsDiff: maxAbs, k3Kl: per(k3), meanWeight: per(sumW), correctedFraction: per(corrected) },
  };
}
