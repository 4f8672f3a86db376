/**
 * TRL's GRPOConfig spellings accepted in a GRPO config (file, flags or code): each snake_case
 * key maps to the path of the key that means the same here. A key given under both names is
 * an error; a TRL key with no counterpart is left for the schema to report as unknown.
 */
import { ConfigError } from '../runtime/errors.js';

export const GRPO_TRL_ALIASES: Readonly<Record<string, string>> = {
  max_steps: 'steps',
  learning_rate: 'optimizer.lr',
  weight_decay: 'optimizer.weightDecay',
  adam_beta1: 'optimizer.beta1',
  adam_beta2: 'optimizer.beta2',
  adam_epsilon: 'optimizer.eps',
  max_grad_norm: 'clipGradNorm',
  num_generations: 'numGenerations',
  max_completion_length: 'maxNewTokens',
  max_prompt_length: 'dataset.maxPromptLength',
  top_k: 'topK',
  top_p: 'topP',
  epsilon: 'clipLow',
  epsilon_high: 'clipHigh',
  num_iterations: 'numIterations',
  steps_per_generation: 'stepsPerGeneration',
  gradient_accumulation_steps: 'gradientAccumulationSteps',
  loss_type: 'lossType',
  scale_rewards: 'scaleRewards',
  importance_sampling_level: 'importanceSamplingLevel',
  mask_truncated_completions: 'maskTruncatedCompletions',
  sync_ref_model: 'syncRefModel',
  ref_model_sync_steps: 'refModelSyncSteps',
  ref_model_mixup_alpha: 'refModelMixupAlpha',
  lr_scheduler_type: 'lrScheduler.type',
  warmup_steps: 'lrScheduler.warmupSteps',
  warmup_ratio: 'lrScheduler.warmupRatio',
  reward_funcs: 'rewards',
  num_generations_eval: 'eval.numGenerations',
  eval_steps: 'eval.every',
  output_dir: 'checkpoint.dir',
  save_steps: 'checkpoint.every',
  model_name_or_path: 'model',
};

/** A copy of `input` with TRL's keys moved to ours (nested paths created). */
export function applyTrlAliases(input: unknown): unknown {
  if (!input || typeof input !== 'object' || Array.isArray(input)) return input;
  const src = input as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(src)) if (!(k in GRPO_TRL_ALIASES)) out[k] = v;
  for (const [k, v] of Object.entries(src)) {
    const path = GRPO_TRL_ALIASES[k];
    if (path === undefined) continue;
    const parts = path.split('.');
    let at = out;
    for (const p of parts.slice(0, -1)) {
      const next = at[p];
      if (next !== undefined && (typeof next !== 'object' || next === null || Array.isArray(next)))
        throw new ConfigError(`GRPO config: ${k} sets ${path}, but ${p} is not an object.`);
      // A copy, so the caller's nested objects are never modified.
      at = at[p] = { ...((next as Record<string, unknown> | undefined) ?? {}) };
    }
    const last = parts.at(-1)!;
    if (at[last] !== undefined)
      throw new ConfigError(`GRPO config: ${k} (TRL's name) and ${path} both set the same key. HINT: keep one of them.`, { key: k, path });
    at[last] = v;
  }
  return out;
}
