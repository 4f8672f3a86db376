/**
 * Group-relative advantages (GRPO, DeepSeekMath §4.1): the `numGenerations` samples of
 * one prompt form a group; each sample's advantage is its reward minus the group mean,
 * divided by the group standard deviation (+eps) unless `scaleByStd` is off (Dr. GRPO).
 * A group whose rewards are all equal gets advantage 0 for every sample.
 */
import { InvalidArgumentError } from '../runtime/errors.js';

export interface AdvantageOptions {
  numGenerations: number;
  /** Divide by the group's std (default true). */
  scaleByStd?: boolean;
  eps?: number;
}

/** rewards is [groups · numGenerations], group-major. */
export function groupAdvantages(rewards: ArrayLike<number>, opts: AdvantageOptions): Float64Array {
  const n = opts.numGenerations;
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`numGenerations must be a positive integer but is ${n}.`);
  if (rewards.length % n !== 0) {
    throw new InvalidArgumentError(`groupAdvantages(): ${rewards.length} rewards do not form groups of numGenerations = ${n}.`, { rewards: rewards.length, numGenerations: n });
  }
  const eps = opts.eps ?? 1e-4;
  const out = new Float64Array(rewards.length);
  for (let g = 0; g < rewards.length; g += n) {
    let mean = 0;
    for (let i = 0; i < n; i++) mean += rewards[g + i]!;
    mean /= n;
    let v = 0;
    for (let i = 0; i < n; i++) v += (rewards[g + i]! - mean) ** 2;
    // torch.std: unbiased (n - 1), as TRL computes it.
    const std = n > 1 ? Math.sqrt(v / (n - 1)) : 0;
    for (let i = 0; i < n; i++) {
      const d = rewards[g + i]! - mean;
      out[g + i] = opts.scaleByStd === false || d === 0 ? d : d / (std + eps);
    }
  }
  return out;
}
