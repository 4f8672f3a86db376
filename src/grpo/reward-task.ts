/**
 * The reward function task run in the Piscina pool: rule-based rewards of the
 * synthetic digit-reversal task for a batch of (prompt, completion) pairs. Pure
 * host code (no device, no native addon), so pool threads start fast.
 */
import { rewardBatch } from '../model/synthetic-task.js';

export function scoreBatch(arg: { prompts: number[][]; completions: number[][] }): number[] {
  return rewardBatch(arg);
}
