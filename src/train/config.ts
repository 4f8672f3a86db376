/**
 * The trainer's configuration (zod): strategy and its parallel sizes, model, initial
 * weights, optimizer, clipping and optional LoRA. Parsed by the trainer actor; bad values are one
 * ConfigError naming every bad field.
 */
import { z } from 'zod';
import { parseConfig } from '../runtime/config.js';
import { ConfigError } from '../runtime/errors.js';
import { TRAINER_DTYPES } from './mixed-precision.js';
import { STRATEGY_KINDS } from './strategy.js';
import { LoraConfigSchema } from '../model/lora-config.js';
import { DEFAULT_BUCKET_BYTES, LOAD_MODES } from '../parallel/sharded-load.js';

const size = (what: string) =>
  z
    .number({ error: `expected ${what} as a number` })
    .int(`expected an integer for ${what}`)
    .positive(`expected a positive integer for ${what}`);

export const OptimizerConfigSchema = z
  .object({
    lr: z.number().positive('expected a positive learning rate'),
    beta1: z.number().min(0).max(1, 'expected beta1 in [0, 1)').optional(),
    beta2: z.number().min(0).max(1, 'expected beta2 in [0, 1)').optional(),
    eps: z.number().positive().optional(),
    weightDecay: z.number().min(0, 'expected a non-negative weight decay').optional(),
  })
  .strict();

export const TrainerConfigSchema = z
  .object({
    strategy: z.enum(STRATEGY_KINDS, { error: `expected strategy to be one of ${STRATEGY_KINDS.join(', ')}` }),
    /** Folder with the HF config.json (and, for `init: 'checkpoint'`, the weights), or a config.json path. */
    model: z.string().min(1, 'expected a model folder or config.json path'),
    /** Seeded initial weights, or the HF checkpoint in `model`. */
    init: z.union([z.object({ seed: z.number().int() }).strict(), z.literal('checkpoint')]).default({ seed: 0 }),
    tp: size('tp').default(1),
    dp: size('dp').optional(),
    ep: size('ep').default(1),
    optimizer: OptimizerConfigSchema.default({ lr: 1e-3 }),
    /** Max global gradient L2 norm; null disables clipping. */
    clipGradNorm: z.number().positive('expected a positive clipGradNorm (or null to disable)').nullable().default(1.0),
    /**
     * How `init: 'checkpoint'` reads the files under fsdp2: rank 0 reads and broadcasts in
     * buckets of `bucketBytes` (device peak: the local shard plus one bucket), or every rank
     * reads the files itself. Other strategies read the checkpoint on every rank.
     */
    load: z
      .object({
        mode: z.enum(LOAD_MODES, { error: `expected load.mode to be one of ${LOAD_MODES.join(', ')}` }).default('rank0-broadcast'),
        bucketBytes: size('load.bucketBytes')
          .refine((n) => n % 4 === 0, 'expected load.bucketBytes to be a multiple of 4')
          .default(DEFAULT_BUCKET_BYTES),
      })
      .strict()
      .default({ mode: 'rank0-broadcast', bucketBytes: DEFAULT_BUCKET_BYTES }),
    /** LoRA adapters (PEFT-like): only they train, base weights stay frozen; every strategy supports it. */
    lora: LoraConfigSchema.optional(),
    /**
     * Compute precision (mixed-precision.ts): bfloat16 computes with bf16 matmul weights and activations over
     * fp32 master weights, gradients and AdamW moments (single and fsdp2; megatron refuses it).
     */
    dtype: z
      .enum(TRAINER_DTYPES, {
        error: "expected dtype to be 'float32' or 'bfloat16' (the trainer's compute precision; bfloat16 keeps fp32 master weights)",
      })
      .default('float32'),
  })
  .strict();

export type TrainerConfig = z.output<typeof TrainerConfigSchema>;
export type TrainerConfigInput = z.input<typeof TrainerConfigSchema>;

export function parseTrainerConfig(value: unknown): TrainerConfig {
  const c = parseConfig(TrainerConfigSchema, value, 'trainer config');
  checkStrategyDtype(c.strategy, c.dtype, 'dtype');
  return c;
}

/**
 * bf16 mixed precision is built for the single and fsdp2 strategies; megatron's sharded
 * linears and their collectives compute in fp32 only, so it refuses bfloat16 rather than
 * silently training in fp32. `what` names the option as the caller's config spells it.
 */
export function checkStrategyDtype(strategy: string, dtype: string, what: string): void {
  if (strategy === 'megatron' && dtype === 'bfloat16')
    throw new ConfigError(
      `Invalid trainer config: ${what} 'bfloat16' is not supported by the megatron strategy (its tensor- and expert-parallel linears compute in fp32 only). HINT: use strategy fsdp2 for bf16 mixed-precision training, or ${what} 'float32' with megatron.`,
      { strategy, dtype },
    );
}
