/**
 * Group-relative advantages (GRPO, DeepSeekMath §4.1): the `numGenerations` samples of
 * one prompt form a group; each sample's advantage is its reward minus the group mean,
 * divided by a standard deviation (+eps) chosen by `scale` (TRL's scale_rewards):
 * 'group' the group's (default), 'batch' the whole batch's (robust to flat groups),
 * 'none' no scaling (Dr. GRPO; `scaleByStd: false` is the same). A group whose rewards are
 * all equal gets advantage 0 for every sample.
 */
import { InvalidArgumentError } from '../runtime/errors.js';

export interface AdvantageOptions {
  numGenerations: number;
  /** Divide by the group's std (default true); `scale` says more. */
  scaleByStd?: boolean;
  scale?: 'group' | 'batch' | 'none';
  eps?: number;
}

/** rewards is [groups · numGenerations], group-major. */
export function groupAdvantages(rewards: ArrayLike<number>, opts: AdvantageOptions): Float64Array {
  const n = opts.numGenerations;
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`numGenerations must be a positive integer but is ${n}.`);
  if (rewards.length % n !== 0) {
    throw new InvalidArgumentError(`groupAdvantages(): ${rewards.length} rewards do not form groups of numGenerations = ${n}.`, {
      rewards: rewards.length,
      numGenerations: n,
    });
  }
  const eps = opts.eps ?? 1e-4;
  const scale = opts.scale ?? (opts.scaleByStd === false ? 'none' : 'group');
  if (!['group', 'batch', 'none'].includes(scale))
    throw new InvalidArgumentError(`groupAdvantages(): scale must be group, batch or none but is ${JSON.stringify(scale)}.`);
  const out = new Float64Array(rewards.length);
  let batchStd = 0;
  if (scale === 'batch') {
    let m = 0;
    for (let i = 0; i < rewards.length; i++) m += rewards[i]!;
    m /= rewards.length;
    let v = 0;
    for (let i = 0; i < rewards.length; i++) v += (rewards[i]! - m) ** 2;
    batchStd = rewards.length > 1 ? Math.sqrt(v / (rewards.length - 1)) : 0;
  }
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
      out[g + i] = scale === 'none' || d === 0 ? d : d / ((scale === 'batch' ? batchStd : std) + eps);
    }
  }
  return out;
}

/**
 * DAPO's dynamic sampling (verl's filter_groups): the groups whose rewards all agree have
 * advantage 0 and teach nothing, so they are dropped. Returns the kept group indices, as
 * many as fit `multiple` rows (the trainer splits rows evenly over its data-parallel ranks):
 * the first groups with a spread, cut to a multiple.
 */
export function groupsWithSpread(rewards: ArrayLike<number>, numGenerations: number, multiple: number): number[] {
  const n = numGenerations;
  if (rewards.length % n !== 0) throw new InvalidArgumentError(`groupsWithSpread(): ${rewards.length} rewards do not form groups of ${n}.`);
  const keep: number[] = [];
  for (let g = 0; g < rewards.length / n; g++) {
    let lo = Infinity,
      hi = -Infinity;
    for (let i = 0; i < n; i++) {
      lo = Math.min(lo, rewards[g * n + i]!);
      hi = Math.max(hi, rewards[g * n + i]!);
    }
    if (hi > lo) keep.push(g);
  }
  // Rows = groups · n must be a multiple of `multiple`: drop groups from the end until it is.
  while (keep.length && (keep.length * n) % multiple !== 0) keep.pop();
  return keep;
}
