/**
 * The GRPO run configuration (zod): placement (server / colocate), trainer and engine
 * parallelism, sampling, the objective, weight sync, checkpoints and logging. A JSON
 * file and command-line flags both land here; every bad value is one ConfigError
 * naming the field, what was received and what is expected.
 */
import { z } from 'zod';
import { byteSize, parseConfig } from '../runtime/config.js';
import { ConfigError } from '../runtime/errors.js';
import { DEFAULT_BUCKET_BYTES } from '../parallel/sharded-load.js';
import { LoraConfigSchema } from '../model/lora-config.js';
import { checkStrategyDtype, OptimizerConfigSchema, TrainerConfigSchema } from '../train/config.js';
import { TRAINER_DTYPES } from '../train/mixed-precision.js';
import { ALGORITHM_SHAPE, checkAlgorithmConfig } from './algorithm-config.js';
import { updatePlan } from './update-plan.js';
import { RewardSpecSchema } from '../data/config.js';
import { ENGINE_DTYPES } from '../rollout/weight-dtype.js';
import { applyTrlAliases } from './aliases.js';
import { resolveMode, singleProcessHost, type GrpoMode, type HostShape } from './placement.js';

const posInt = (what: string) =>
  z
    .number({ error: `expected ${what} as a number` })
    .int(`expected an integer for ${what}`)
    .positive(`expected a positive integer for ${what}`);

export const GrpoConfigSchema = z
  .object({
    /**
     * server: trainer and engine on separate ranks (half each by default); colocate: both on
     * every rank; auto: colocate when one process runs every rank and the host has a core per
     * rank, server otherwise (placement.ts says why).
     */
    mode: z.enum(['auto', 'server', 'colocate'], { error: 'expected mode to be auto, server or colocate' }).default('auto'),
    /** Model folder as Hugging Face writes it (config.json; weights, tokenizer and generation_config.json when present). */
    model: z.string().min(1),
    /** Initial weights: the model folder's safetensors ('checkpoint'), seeded random ones ('seed'), or 'auto': the checkpoint when the folder has one. */
    init: z.enum(['auto', 'checkpoint', 'seed'], { error: 'expected init to be auto, checkpoint or seed' }).default('auto'),
    /** Prompts: a JSONL or Parquet file with a `prompt` or `messages` column (absent: the built-in digit task). */
    dataset: z
      .object({
        path: z.string().min(1),
        format: z.enum(['jsonl', 'parquet']).optional(),
        /** Prompt length limit in tokens after the chat template (TRL max_prompt_length). */
        maxPromptLength: posInt('dataset.maxPromptLength').optional(),
        /** Over-long prompts: drop the row, or keep its last maxPromptLength tokens. */
        overlong: z.enum(['filter', 'truncate']).default('filter'),
        shuffle: z.boolean().default(true),
        seed: z.number().int().default(0),
        epochs: posInt('dataset.epochs').default(1),
      })
      .strict()
      .optional(),
    /** Tokenizer and chat template (default: the model folder's tokenizer.json / tokenizer_config.json). */
    tokenizer: z
      .object({
        path: z.string().min(1).optional(),
        addGenerationPrompt: z.boolean().default(true),
        chatTemplateKwargs: z.record(z.string(), z.unknown()).default({}),
      })
      .strict()
      .default({ addGenerationPrompt: true, chatTemplateKwargs: {} }),
    /**
     * Reward functions: { module, export, weight } (your code) or { builtin, weight } (accuracy, format,
     * overlong, reverse_digits). Default for the digit task: reverse_digits.
     */
    rewards: z.array(RewardSpecSchema).min(1, 'expected at least one reward function').optional(),
    /** Deadline of one reward function on one step's samples. */
    rewardTimeoutMs: posInt('rewardTimeoutMs').default(30_000),
    /** Completions cut by maxNewTokens take no loss (TRL mask_truncated_completions); they still count in the advantages. */
    maskTruncatedCompletions: z.boolean().default(false),
    seed: z.number().int().default(0),
    steps: posInt('steps').default(20),
    trainer: z
      .object({
        strategy: z.enum(['fsdp2', 'megatron'], { error: 'expected trainer.strategy to be fsdp2 or megatron' }).default('fsdp2'),
        /** Trainer ranks in server mode (default: half the world). */
        ranks: posInt('trainer.ranks').optional(),
        tp: posInt('trainer.tp').default(1),
        ep: posInt('trainer.ep').default(1),
        /** LoRA adapters (only adapters train; syncs after the first send adapters only). */
        lora: LoraConfigSchema.optional(),
        /** How fsdp2 reads a checkpoint (`init: checkpoint`): { mode: 'rank0-broadcast' | 'every-rank-reads', bucketBytes }. */
        load: TrainerConfigSchema.shape.load,
        /**
         * The trainer's compute precision (src/train/mixed-precision.ts): bfloat16 computes with bf16 matmul weights
         * and activations over fp32 master weights, gradients and AdamW moments (fsdp2 only; megatron refuses it).
         * Weight sync and checkpoints read the fp32 masters either way.
         */
        dtype: z.enum(TRAINER_DTYPES, { error: "expected trainer.dtype to be 'float32' or 'bfloat16' (the trainer's compute precision)" }).default('float32'),
      })
      .strict()
      .default({ strategy: 'fsdp2', tp: 1, ep: 1, load: { mode: 'rank0-broadcast', bucketBytes: DEFAULT_BUCKET_BYTES }, dtype: 'float32' }),
    engine: z
      .object({
        tp: z.union([z.literal(1), z.literal(2), z.literal(4)], { error: 'expected engine.tp to be 1, 2 or 4' }).default(1),
        /**
         * The rollout engine's weight precision (src/rollout/weight-dtype.ts): bfloat16 holds its matmul weights in
         * bf16 (half the device bytes and half the bytes a weight sync moves; activations and sampling stay fp32).
         * The trainer's own precision is trainer.dtype.
         */
        dtype: z
          .enum(ENGINE_DTYPES, { error: "expected engine.dtype to be 'float32' or 'bfloat16' (the rollout engine's weight precision)" })
          .default('float32'),
      })
      .strict()
      .default({ tp: 1, dtype: 'float32' }),
    /** Prompts per step (each sampled numGenerations times). */
    promptsPerStep: posInt('promptsPerStep').default(16),
    numGenerations: posInt('numGenerations').default(8),
    maxNewTokens: posInt('maxNewTokens').default(12),
    temperature: z.number().positive('expected a positive temperature').default(1),
    topK: z.number().int().min(0, 'expected topK >= 0 (0 = off)').default(0),
    topP: z.number().gt(0).max(1, 'expected topP in (0, 1]').default(1),
    optimizer: OptimizerConfigSchema.default({ lr: 2e-3 }),
    /** Supervised warm-up steps (token-mean cross-entropy on reference answers) before GRPO, as RL pipelines start from an SFT model. */
    sftWarmup: z
      .object({
        steps: z.number().int().min(0).default(0),
        batch: posInt('sftWarmup.batch').default(64),
        lr: z.number().positive().default(5e-3),
        /** Dataset runs: the column with the reference completion text. */
        column: z.string().min(1).default('completion'),
      })
      .strict()
      .default({ steps: 0, batch: 64, lr: 5e-3, column: 'completion' }),
    clipGradNorm: z.number().positive().nullable().default(1),
    clipLow: z.number().min(0).max(1).default(0.2),
    clipHigh: z.number().min(0).default(0.28),
    /** KL coefficient to the frozen initial policy (0: no reference model). */
    beta: z.number().min(0, 'expected beta >= 0').default(0),
    // Updates per rollout, loss type, clipping, KL, correction, lr schedule (algorithm-config.ts).
    ...ALGORITHM_SHAPE,
    sync: z
      .object({
        bucketBytes: byteSize.default(512 * 2 ** 20),
        /** Per-tensor checksums + probe-batch log-prob parity after every sync. */
        verify: z.boolean().default(false),
        /** Max |Δ log-prob| between trainer and engine on the probe batch (default 1e-3; with engine.dtype bfloat16, BF16_PROBE_TOLERANCE). */
        tolerance: z.number().positive().default(1e-3),
      })
      .strict()
      .default({ bucketBytes: 512 * 2 ** 20, verify: false, tolerance: 1e-3 }),
    checkpoint: z
      // `every` is optional: a run may only resume from (not save to) dir.
      .object({ dir: z.string().min(1), every: posInt('checkpoint.every').optional() })
      .strict()
      .optional(),
    /** After the last step, write the model as a Hugging Face folder (config, generation config and tokenizer files of the input kept). */
    save: z
      .object({
        dir: z.string().min(1),
        /** Default: the input checkpoint's dtype (config.json torch_dtype / dtype), else float32. */
        dtype: z.enum(['float32', 'bfloat16', 'float16']).optional(),
        /** MoE experts per expert (transformers 4.x) or fused (transformers 5); default: the input checkpoint's layout. */
        expertLayout: z.enum(['per-expert', 'fused']).optional(),
        /** LoRA runs: the full model with the adapters merged instead of PEFT's adapter folder. */
        merged: z.boolean().default(false),
      })
      .strict()
      .optional(),
    /** Resume from the newest checkpoint in checkpoint.dir. */
    resume: z.boolean().default(false),
    /** JSONL run log: a header line (run id, config, versions, commit), then one line per step. */
    log: z.string().min(1).optional(),
    /** Replace an existing run log (a new run refuses one that holds records; a resumed run appends). */
    logOverwrite: z.boolean().default(false),
    progress: z.boolean().default(true),
    /** Evaluation on held-out prompts every `every` steps (and after the last): greedy by default, logged as `eval` records. */
    eval: z
      .object({
        every: posInt('eval.every'),
        prompts: posInt('eval.prompts').default(32),
        /** Samples per held-out prompt (TRL num_generations_eval). */
        numGenerations: posInt('eval.numGenerations').default(1),
        /** 0: greedy. */
        temperature: z.number().min(0, 'expected eval.temperature >= 0 (0 = greedy)').default(0),
        /** Held-out prompts of a dataset run (a JSONL / Parquet file like dataset.path). */
        dataset: z.string().min(1).optional(),
      })
      .strict()
      .optional(),
  })
  .strict();

/** A parsed config: `mode` is resolved to where the run places trainer and engine. */
export type GrpoConfig = Omit<z.output<typeof GrpoConfigSchema>, 'mode'> & { mode: GrpoMode };
export type GrpoConfigInput = z.input<typeof GrpoConfigSchema>;

/**
 * The probe tolerance of a verified sync into a bfloat16 engine when none is given: the
 * engine's bf16 weights (and the activations rounded for their matmuls) move the fp32
 * trainer's log-probs by ~1e-3 on average on the quickstart (engineTrainerLogprobDiff in the
 * run log); per token, up to 4e-3 on tiny-dense and 7e-2 on tiny-moe, where a near-tied
 * router choice can flip. The sync's fingerprints stay exact whatever the tolerance.
 */
export const BF16_PROBE_TOLERANCE = 0.1;

/**
 * Parses a config and checks it against the world size. `host` decides `mode: 'auto'`
 * (default: this process runs every rank on its own cores).
 */
export function parseGrpoConfig(value: unknown, worldSize: number, host: HostShape = singleProcessHost(worldSize)): GrpoConfig {
  const input = applyTrlAliases(value);
  const parsed = parseConfig(GrpoConfigSchema, input, 'GRPO config');
  const c: GrpoConfig = { ...parsed, mode: resolveMode(parsed.mode, worldSize, host, parsed.trainer.ranks) };
  const given = (input as { sync?: { tolerance?: unknown } } | null)?.sync?.tolerance;
  if (c.engine.dtype === 'bfloat16' && given === undefined) c.sync.tolerance = BF16_PROBE_TOLERANCE;
  checkStrategyDtype(c.trainer.strategy, c.trainer.dtype, 'trainer.dtype');
  const trainerRanks = c.mode === 'colocate' ? worldSize : (c.trainer.ranks ?? Math.floor(worldSize / 2));
  const engineRanks = c.mode === 'colocate' ? worldSize : worldSize - trainerRanks;
  if (trainerRanks < 1 || engineRanks < 1) {
    throw new ConfigError(
      `GRPO: mode ${c.mode} on ${worldSize} ranks leaves ${trainerRanks} trainer and ${engineRanks} engine ranks; each needs at least one. HINT: launch more ranks or use --mode colocate.`,
    );
  }
  if (engineRanks % c.engine.tp !== 0) {
    throw new ConfigError(`GRPO: engine.tp = ${c.engine.tp} does not divide the ${engineRanks} engine ranks.`, { engineRanks, tp: c.engine.tp });
  }
  if (trainerRanks % c.trainer.tp !== 0) {
    throw new ConfigError(`GRPO: trainer.tp = ${c.trainer.tp} does not divide the ${trainerRanks} trainer ranks.`);
  }
  if (c.dataset && !c.rewards)
    throw new ConfigError(
      'GRPO: a dataset run needs reward functions: rewards: [{ module, export, weight }] or built-ins such as { builtin: "accuracy" }. HINT: add --reward MODULE#EXPORT or a rewards list to the config.',
    );
  if (c.dataset && c.eval && !c.eval.dataset)
    throw new ConfigError('GRPO: eval on a dataset run needs eval.dataset (held-out prompts). HINT: add eval.dataset, or drop eval.');
  if (c.resume && !c.checkpoint) throw new ConfigError('GRPO: --resume needs --checkpoint-dir (checkpoint.dir): the folder the run saved its checkpoints to.');
  const samples = c.promptsPerStep * c.numGenerations;
  const dp = trainerRanks / c.trainer.tp;
  if (samples % dp !== 0) {
    throw new ConfigError(
      `GRPO: promptsPerStep x numGenerations = ${samples} samples do not split over ${dp} data-parallel trainer ranks. HINT: make it a multiple of ${dp}.`,
      { samples, dp },
    );
  }
  updatePlan({
    rows: samples,
    numIterations: c.numIterations,
    stepsPerGeneration: c.stepsPerGeneration,
    gradientAccumulationSteps: c.gradientAccumulationSteps,
    dp,
  });
  checkAlgorithmConfig(c);
  if (c.klInReward && c.beta === 0)
    throw new ConfigError('GRPO: klInReward puts beta x KL into the reward, but beta is 0. HINT: set beta > 0, or drop klInReward.');
  if (c.syncRefModel && c.beta === 0)
    throw new ConfigError('GRPO: syncRefModel refreshes the KL reference, but beta is 0 (no reference). HINT: set beta > 0, or drop syncRefModel.');
  const engineDp = engineRanks / c.engine.tp;
  if (c.eval && c.eval.prompts % engineDp !== 0) {
    throw new ConfigError(`GRPO: eval.prompts = ${c.eval.prompts} does not split over ${engineDp} engine replicas. HINT: make it a multiple of ${engineDp}.`);
  }
  if (c.promptsPerStep % engineDp !== 0) {
    throw new ConfigError(
      `GRPO: promptsPerStep = ${c.promptsPerStep} does not split over ${engineDp} engine replicas (engine ranks / engine.tp). HINT: make it a multiple of ${engineDp}.`,
    );
  }
  return c;
}
