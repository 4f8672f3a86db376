/**
 * A round of sampled completions (group-major: numGenerations rows per prompt, in prompt
 * order) and what DAPO's dynamic sampling does with rounds: keep the groups whose rewards
 * differ, append the informative groups of further rounds, cut the result to at most
 * `maxGroups` groups whose rows split evenly over the trainer's micro-batches.
 */
import { groupsWithSpread } from './advantages.js';

export interface Sampled {
  prompts: number[][];
  completions: number[][];
  engineLogprobs: number[][];
  /** Weighted total per sample. */
  rewards: number[];
  /** 'stop' (a stop id) or 'length' (cut by maxNewTokens), per sample. */
  finishReasons: string[];
  /** Per-reward-function mean / std over the round's samples (for the logs). */
  rewardSummary?: Record<string, { mean: number; std: number; count: number }>;
}

/** The rows of `groups` (group indices) of a round. */
export function pickGroups(s: Sampled, groups: readonly number[], G: number): Sampled {
  const rows = groups.flatMap((g) => Array.from({ length: G }, (_, i) => g * G + i));
  return {
    prompts: rows.map((i) => s.prompts[i]!),
    completions: rows.map((i) => s.completions[i]!),
    engineLogprobs: rows.map((i) => s.engineLogprobs[i]!),
    rewards: rows.map((i) => s.rewards[i]!),
    finishReasons: rows.map((i) => s.finishReasons[i]!),
  };
}

/** `kept` plus the groups of `round` whose rewards differ; also how many groups of the round were flat. */
export function addInformative(kept: Sampled | null, round: Sampled, G: number): { kept: Sampled; flat: number } {
  const spread = groupsWithSpread(round.rewards, G, 1);
  const add = pickGroups(round, spread, G);
  const flat = round.rewards.length / G - spread.length;
  if (!kept) return { kept: add, flat };
  return {
    kept: {
      prompts: [...kept.prompts, ...add.prompts],
      completions: [...kept.completions, ...add.completions],
      engineLogprobs: [...kept.engineLogprobs, ...add.engineLogprobs],
      rewards: [...kept.rewards, ...add.rewards],
      finishReasons: [...kept.finishReasons, ...add.finishReasons],
    },
    flat,
  };
}

/** The first groups of `s`, at most `maxGroups`, as many as make a multiple of `rowMultiple` rows. */
export function trimGroups(s: Sampled, maxGroups: number, rowMultiple: number, G: number): Sampled {
  let n = Math.min(maxGroups, s.rewards.length / G);
  while (n > 0 && (n * G) % rowMultiple !== 0) n--;
  return pickGroups(
    s,
    Array.from({ length: n }, (_, g) => g),
    G,
  );
}
