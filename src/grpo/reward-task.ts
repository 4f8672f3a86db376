/**
 * The reward function task run in the Piscina pool: rule-based rewards of the
 * synthetic digit-reversal task for a batch of (prompt, completion) pairs. Pure
 * host code (no device, no native addon), so pool threads start fast.
 */
import { rewardBatch } from '../model/synthetic-task.js';

/** The reward function's name in the run log's per-function rewards. */
export const REWARD_FUNCTION = 'reverse_digits';

export function scoreBatch(arg: { prompts: number[][]; completions: number[][] }): number[] {
  return rewardBatch(arg);
}
