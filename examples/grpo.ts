/**
 * Ascent GRPO quickstart: RL post-training of a tiny Qwen3-style model on the shipped
 * synthetic task (reverse a string of digits; the rule-based reward gives partial
 * credit per correct digit and 1 for an exact answer), with per-rank trainer,
 * rollout-worker and weight-sync actors driven by rank 0.
 *
 *   npm run grpo                        # 16 ranks; mode auto: 8 trainer (fsdp2) + 8 engine ranks
 *                                       # (server) unless the host has a core per rank
 *   npm run grpo -- --mode colocate     # trainer and engine on all 16 ranks
 *   npm run grpo -- --help              # every flag; --config file.json for a JSON config
 *
 * As RL pipelines do, the policy starts from a short supervised warm-up (30 steps of
 * cross-entropy on reference answers), then GRPO takes over: 16 prompts x 8 samples
 * per step, group-normalised advantages, clipped surrogate, a weight sync to the
 * engines after every step. Seeded: the same flags give the same run.
 */
import { fileURLToPath } from 'node:url';
import { checkGrpoArgs, grpoMain, type GrpoConfigInput, type RankContext } from 'ascent';

const DEFAULTS: Partial<GrpoConfigInput> = {
  model: fileURLToPath(new URL('./models/tiny-dense', import.meta.url)),
  steps: 80,
  seed: 0,
  optimizer: { lr: 4e-3 },
  sftWarmup: { steps: 30, batch: 64, lr: 5e-3 },
};

/** Called once by launch before the ranks start: a bad flag is one line, exit 2, at once; --help prints the usage, no rank starts. */
export async function validateArgs(a: { args: string[]; worldSize: number; localWorldSize?: number }): Promise<{ stdout: string } | undefined> {
  return checkGrpoArgs(a, DEFAULTS);
}

export async function main(ctx: RankContext): Promise<void> {
  await grpoMain(ctx, DEFAULTS);
}
