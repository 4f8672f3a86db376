/**
 * Ascent GRPO quickstart: RL post-training of a tiny Qwen3-style model on the shipped
 * synthetic task (reverse a string of digits; reward = fraction of digits right, 1 for
 * an exact answer), with trainer, rollout-worker and weight-sync actors.
 *
 *   npx launch --nproc 16 examples/grpo.ts                     # 8 trainer + 8 engine ranks (server mode)
 *   npx launch --nproc 16 examples/grpo.ts --mode colocate     # trainer and engine on all 16 ranks
 *   npx launch --nproc 16 examples/grpo.ts --config my.json --steps 40 --log runs/grpo.jsonl
 *
 * Flags override the JSON config; `--help` lists them. The model starts from a short
 * supervised warm-up checkpoint? No: from seeded random weights of tiny-dense, so the
 * reward starts near the random-guess level and rises as GRPO trains.
 */
import { fileURLToPath } from 'node:url';
import { grpoMain, type RankContext } from 'ascent';

export async function main(ctx: RankContext): Promise<void> {
  await grpoMain(ctx, { model: fileURLToPath(new URL('./models/tiny-dense', import.meta.url)) });
}
