/**
 * The GRPO entry `ascent grpo` launches on every rank (also usable as
 * `ascent launch --nproc N <this file> [flags]`): flags and `--config` as src/grpo/cli.ts
 * reads them, no defaults beyond the config schema's (a model is required).
 */
import type { RankContext } from '../runtime/actor-system/rank-context.js';
import { checkGrpoArgs, grpoMain } from './cli.js';

/** Called once by launch before the ranks start: a bad flag is one line, exit 2; --help prints the usage, no rank starts. */
export async function validateArgs(a: { args: string[]; worldSize: number; localWorldSize?: number }): Promise<{ stdout: string } | undefined> {
  return checkGrpoArgs(a);
}

export async function main(ctx: RankContext): Promise<void> {
  await grpoMain(ctx);
}
