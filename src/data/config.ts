/**
 * Zod schemas for the data layer's configs: tokenizer/chat, prompt dataset and
 * reward functions. Keys are camelCase; the TRL (GRPOConfig / ScriptArguments)
 * snake_case names listed in `TRL_ALIASES` are accepted too and renamed.
 */
import { z } from 'zod';
import { ConfigError } from '../runtime/errors.js';

/** TRL snake_case name → our camelCase name. */
export const TRL_ALIASES: Readonly<Record<string, string>> = {
  max_prompt_length: 'maxPromptLength',
  shuffle_dataset: 'shuffle',
  num_train_epochs: 'epochs',
  data_seed: 'seed',
  chat_template_kwargs: 'chatTemplateKwargs',
  add_generation_prompt: 'addGenerationPrompt',
  reward_funcs: 'rewards',
  max_completion_length: 'maxCompletionLength',
};

function withAliases<T extends z.ZodTypeAny>(schema: T) {
  return z.preprocess((v) => {
    if (!v || typeof v !== 'object' || Array.isArray(v)) return v;
    const out: Record<string, unknown> = {};
    for (const [k, val] of Object.entries(v)) out[TRL_ALIASES[k] ?? k] = val;
    return out;
  }, schema);
}

export const TokenizerConfigSchema = withAliases(
  z.strictObject({
    /** HF model folder holding tokenizer.json, tokenizer_config.json (and generation_config.json). */
    path: z.string().min(1),
    /** Render `messages` prompts with `add_generation_prompt` (default true). */
    addGenerationPrompt: z.boolean().default(true),
    /** Extra chat template variables, e.g. `{ enable_thinking: false }`. */
    chatTemplateKwargs: z.record(z.string(), z.unknown()).default({}),
  }),
);
export type TokenizerConfig = z.output<typeof TokenizerConfigSchema>;

export const DatasetConfigSchema = withAliases(
  z.strictObject({
    /** A .jsonl or .parquet file. */
    path: z.string().min(1),
    /** Default: from the file extension. */
    format: z.enum(['jsonl', 'parquet']).optional(),
    /** Prompt length limit in tokens (after the chat template). */
    maxPromptLength: z.number().int().positive().optional(),
    /** Over-long prompts: `filter` drops the row, `truncate` keeps the last maxPromptLength tokens (left truncation). */
    overlong: z.enum(['filter', 'truncate']).default('filter'),
    shuffle: z.boolean().default(true),
    seed: z.number().int().default(0),
    epochs: z.number().int().positive().default(1),
    /** Prompts per step (before the group expansion of GRPO). */
    promptsPerStep: z.number().int().positive().default(8),
    /** Keep the last, smaller batch of an epoch (default false, like drop_last=True). */
    keepLastBatch: z.boolean().default(false),
  }),
);
export type DatasetConfig = z.output<typeof DatasetConfigSchema>;

export const BUILTIN_REWARDS = ['accuracy', 'format', 'overlong', 'reverse_digits'] as const;
export type BuiltinRewardName = (typeof BUILTIN_REWARDS)[number];

const UserRewardSchema = z.strictObject({
  /** Module path (relative to the current directory) or file URL; .js/.mjs/.ts. */
  module: z.string().min(1),
  /** Exported function name (default `default`). */
  export: z.string().min(1).default('default'),
  weight: z.number().finite().default(1),
  name: z.string().min(1).optional(),
});

const BuiltinRewardSchema = withAliases(
  z.strictObject({
    builtin: z.enum(BUILTIN_REWARDS),
    weight: z.number().finite().default(1),
    name: z.string().min(1).optional(),
    /** accuracy: the dataset column with the reference answer (default `answer`). */
    column: z.string().min(1).optional(),
    /** format: the regex a completion must match (whole text, dotall). */
    pattern: z.string().min(1).optional(),
    /** overlong: L_max (maxCompletionLength) and the soft buffer L_cache. */
    maxCompletionLength: z.number().int().positive().optional(),
    cacheLength: z.number().int().nonnegative().optional(),
  }),
);

export const RewardSpecSchema = z.union([UserRewardSchema, BuiltinRewardSchema]);
export type RewardSpec = z.output<typeof RewardSpecSchema>;
export type UserRewardSpec = z.output<typeof UserRewardSchema>;
export type BuiltinRewardSpec = z.output<typeof BuiltinRewardSchema>;

export const RewardsConfigSchema = withAliases(
  z.strictObject({
    rewards: z.array(RewardSpecSchema).min(1),
    /** Per-call deadline of one reward function on one batch. */
    timeoutMs: z.number().int().positive().default(30_000),
  }),
);
export type RewardsConfig = z.output<typeof RewardsConfigSchema>;

/** Parses `value` with `schema`; a failure is a ConfigError listing each bad key. */
export function parseConfig<S extends z.ZodTypeAny>(schema: S, value: unknown, what: string): z.output<S> {
  const r = schema.safeParse(value);
  if (r.success) return r.data as z.output<S>;
  const issues = r.error.issues.map((i) => `${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`).join('; ');
  throw new ConfigError(
    `Invalid ${what} config: ${issues}. HINT: fix these keys (camelCase, or the TRL snake_case aliases: ${Object.keys(TRL_ALIASES).join(', ')}).`,
    { issues: r.error.issues },
  );
}
