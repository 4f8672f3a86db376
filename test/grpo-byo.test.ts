/**
 * GRPO on "your own" things, end to end under `launch` (2 ranks): a Hugging Face model
 * folder (a character-level BPE tokenizer with a Qwen-style chat template, two EOS ids in
 * generation_config.json, unknown config keys), a JSONL dataset of chat prompts with an
 * answer column, two weighted reward functions from a user module, the supervised warm-up
 * on the dataset's completion column, evaluation on a held-out file, masking of truncated
 * completions. A reward that throws fails the run naming it.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, ROOT } from './helpers/parallel-launch.js';
// @ts-expect-error plain JS fixture
import { makeCharModel } from './fixtures/grpo/char-model.mjs';

let dir: string;
let model: string;
const rewardsModule = join(ROOT, 'test', 'fixtures', 'grpo', 'byo-rewards.mjs');

function sums(seed: number, n: number) {
  const rows = [];
  let x = seed;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    const a = x % 10,
      b = (x >> 8) % 10;
    rows.push({ messages: [{ role: 'user', content: `${a}+${b}=?` }], answer: String(a + b), completion: String(a + b), topic: 'sum' });
  }
  return rows.map((r) => JSON.stringify(r)).join('\n');
}

beforeAll(() => {
  ensureParallelBuilt();
  dir = mkdtempSync(join(tmpdir(), 'ascent-byo-'));
  model = makeCharModel(join(dir, 'model'));
  writeFileSync(join(dir, 'train.jsonl'), sums(1, 64));
  writeFileSync(join(dir, 'eval.jsonl'), sums(99, 8));
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const base = () => ({
  mode: 'colocate',
  model,
  init: 'seed',
  trainer: { strategy: 'fsdp2' },
  steps: 3,
  promptsPerStep: 4,
  numGenerations: 4,
  maxNewTokens: 4,
  seed: 2,
  progress: false,
  dataset: { path: join(dir, 'train.jsonl'), maxPromptLength: 64 },
  sftWarmup: { steps: 10, batch: 16, lr: 1e-2, column: 'completion' },
  eval: { every: 2, prompts: 4, dataset: join(dir, 'eval.jsonl') },
  maskTruncatedCompletions: true,
});

describe('GRPO on your own model folder, dataset and rewards (launch)', () => {
  it('tokenizer + chat template + dataset + two weighted user rewards + SFT on the completion column + held-out eval', async () => {
    const log = join(dir, 'byo.jsonl');
    const cfg = {
      ...base(),
      log,
      save: { dir: join(dir, 'saved'), dtype: 'bfloat16' },
      rewards: [
        { module: rewardsModule, export: 'exact', weight: 1 },
        { module: rewardsModule, export: 'brevity', weight: 0.5, name: 'brevity' },
      ],
    };
    // The scenario fixture resolves `model` by name; this run passes a folder, so use the plain entry.
    const r = await launchFixture(2, 'test/fixtures/grpo/run.mjs', [JSON.stringify(cfg)], {}, 170_000);
    expect(r.stderr, r.stdout.slice(-3000)).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/SFT warm-up: 10 steps, loss [\d.]+ -> [\d.]+/);
    const recs = readFileSync(log, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const steps = recs.filter((x) => x.type === 'step');
    expect(steps.map((s) => s.step)).toEqual([1, 2, 3]);
    for (const s of steps) {
      expect(Object.keys(s.rewards).sort()).toEqual(['brevity', 'byo-rewards.mjs:exact']);
      // The total is the weighted sum: exact + 0.5 · brevity (brevity skips truncated samples: its mean is over the others).
      expect(s.rewardStats['byo-rewards.mjs:exact'].count).toBe(16);
      expect(s.rewardStats.brevity.count).toBe(16 - Math.round(s.truncatedFraction * 16));
      expect(s.maskedTruncatedRows).toBe(Math.round(s.truncatedFraction * 16));
      expect(Number.isFinite(s.rewardMean)).toBe(true);
    }
    const header = recs.find((x) => x.type === 'header');
    expect(header.config.dataset.path).toBe(join(dir, 'train.jsonl'));
    const evals = recs.filter((x) => x.type === 'eval');
    expect(evals.map((e) => e.step)).toEqual([2, 3]);
    expect(evals.every((e) => e.samples === 4)).toBe(true);
    // The final save: a Hugging Face folder with the input's config keys, tokenizer and generation config.
    const saved = JSON.parse(readFileSync(join(dir, 'saved', 'config.json'), 'utf8'));
    expect(saved).toMatchObject({ custom_field: { kept: true }, torch_dtype: 'bfloat16', vocab_size: 74 });
    expect(readFileSync(join(dir, 'saved', 'tokenizer_config.json'), 'utf8')).toBe(readFileSync(join(model, 'tokenizer_config.json'), 'utf8'));
    expect(r.stdout).toMatch(/saved the model as a Hugging Face folder: .*saved/);
  }, 180_000);

  it('a reward that throws fails the step with a message naming it', async () => {
    const cfg = {
      ...base(),
      steps: 1,
      sftWarmup: { steps: 0 },
      eval: undefined,
      rewards: [
        { module: rewardsModule, export: 'exact' },
        { module: rewardsModule, export: 'boom', name: 'flaky-judge' },
      ],
    };
    const r = await launchFixture(2, 'test/fixtures/grpo/run.mjs', [JSON.stringify(cfg)], {}, 170_000);
    expect(r.code).not.toBe(0);
    expect(r.stderr + r.stdout).toMatch(/flaky-judge/);
    expect(r.stderr + r.stdout).toMatch(/the reward model is down/);
  }, 180_000);

  it('bad data is one clear error before any rank starts training: a dataset run without rewards, a tokenizer larger than the model', async () => {
    const { checkGrpoConfig } = await import('../src/grpo/driver.js');
    await expect(checkGrpoConfig({ ...base(), eval: undefined } as never, 2, false)).rejects.toThrow(/a dataset run needs reward functions/);
    const small = makeCharModel(join(dir, 'small'));
    const cfgPath = join(small, 'config.json');
    writeFileSync(cfgPath, JSON.stringify({ ...JSON.parse(readFileSync(cfgPath, 'utf8')), vocab_size: 40 }));
    await expect(checkGrpoConfig({ ...base(), model: small, eval: undefined, rewards: [{ builtin: 'accuracy' }] } as never, 2, false)).rejects.toThrow(
      /the tokenizer has 74 tokens but the model's vocabulary .* has 40/,
    );
  });
});
