import { describe, expect, it } from 'vitest';
import { DatasetConfigSchema, RewardsConfigSchema, TRL_ALIASES, TokenizerConfigSchema, parseConfig } from '../src/data/index.js';
import { ConfigError } from '../src/runtime/errors.js';

describe('data configs', () => {
  it('defaults and TRL snake_case aliases', () => {
    const d = parseConfig(
      DatasetConfigSchema,
      { path: 'a.jsonl', max_prompt_length: 256, shuffle_dataset: false, num_train_epochs: 3, data_seed: 9 },
      'dataset',
    );
    expect(d).toEqual({
      path: 'a.jsonl',
      maxPromptLength: 256,
      overlong: 'filter',
      shuffle: false,
      seed: 9,
      epochs: 3,
      promptsPerStep: 8,
      keepLastBatch: false,
    });
    const t = parseConfig(TokenizerConfigSchema, { path: 'm', chat_template_kwargs: { enable_thinking: false } }, 'tokenizer');
    expect(t).toEqual({ path: 'm', addGenerationPrompt: true, chatTemplateKwargs: { enable_thinking: false } });
    const r = parseConfig(
      RewardsConfigSchema,
      { reward_funcs: [{ module: 'r.mjs' }, { builtin: 'overlong', max_completion_length: 8, cacheLength: 2, weight: 0.5 }] },
      'rewards',
    );
    expect(r).toEqual({
      timeoutMs: 30_000,
      rewards: [
        { module: 'r.mjs', export: 'default', weight: 1 },
        { builtin: 'overlong', maxCompletionLength: 8, cacheLength: 2, weight: 0.5 },
      ],
    });
    expect(Object.values(TRL_ALIASES)).toContain('maxPromptLength');
  });

  it('bad values are ConfigErrors naming the key', () => {
    expect(() => parseConfig(DatasetConfigSchema, { path: 'a', overlong: 'cut' }, 'dataset')).toThrow(ConfigError);
    expect(() => parseConfig(DatasetConfigSchema, { path: 'a', overlong: 'cut' }, 'dataset')).toThrow(/Invalid dataset config: overlong/);
    expect(() => parseConfig(DatasetConfigSchema, { path: 'a', maxPromptLen: 3 }, 'dataset')).toThrow(/maxPromptLen/);
    expect(() => parseConfig(RewardsConfigSchema, { rewards: [{ builtin: 'bleu' }] }, 'rewards')).toThrow(/Invalid rewards config: rewards\.0/);
  });
});
