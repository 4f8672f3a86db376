import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RewardError, RewardRunner, builtinRewards, type RewardInput } from '../src/data/index.js';
import { ConfigError, TimeoutError } from '../src/runtime/errors.js';
import { TaskPool } from '../src/runtime/actor-system/task-pool.js';
import { makeProblem, reward as digitReward } from '../src/data/synthetic-task.js';
import { rewardBatch as scoreBatch } from '../src/data/synthetic-task.js';

const here = dirname(fileURLToPath(import.meta.url));
const MOD = join(here, '..', 'test', 'fixtures', 'data', 'rewards.mjs');

let pool: TaskPool;
beforeAll(() => {
  pool = new TaskPool({ maxThreads: 2 });
});
afterAll(async () => {
  await pool.close();
});

const input: RewardInput = {
  prompts: ['Q1', 'Q22', 'Q333'],
  promptIds: [[1], [2, 2], [3, 3, 3]],
  completions: ['The answer is \\boxed{42}.', '#### 1,000', 'I think 7'],
  completionIds: [[5, 6, 7, 8], [9, 9], [4]],
  finishReasons: ['stop', 'length', 'stop'],
  columns: [{ answer: '42', level: 1 }, { answer: '1000' }, { answer: '8', level: 3 }],
};

describe('reward runner in real pool threads', () => {
  it('runs several user rewards, weighted, with a NaN-aware sum and per-reward mean/std', async () => {
    const r = new RewardRunner(pool, {
      rewards: [
        { module: MOD, export: 'length', weight: 0.5 },
        { module: MOD, export: 'stopped', weight: 2, name: 'stop' },
        { module: MOD, export: 'levelOrNull', weight: -1 },
        { module: MOD, export: 'echoPrompt', weight: 0 },
      ],
    });
    const out = await r.score(input);
    expect(r.names).toEqual(['rewards.mjs:length', 'stop', 'rewards.mjs:levelOrNull', 'rewards.mjs:echoPrompt']);
    expect(out.perReward['stop']).toEqual([1, 0, 1]);
    expect(out.perReward['rewards.mjs:levelOrNull']).toEqual([1, null, 3]);
    expect(out.perReward['rewards.mjs:echoPrompt']).toEqual([2 + 25, 3 + 10, 4 + 9]);
    // total = 0.5*len + 2*stop - level (null skipped)
    expect(out.total).toEqual([0.5 * 4 + 2 - 1, 0.5 * 2 + 0, 0.5 * 1 + 2 - 3]);
    expect(out.allNullSamples).toBe(0);
    const s = out.summary['rewards.mjs:length']!;
    expect(s.count).toBe(3);
    expect(s.mean).toBeCloseTo(7 / 3, 12);
    expect(s.std).toBeCloseTo(Math.sqrt(((4 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (1 - 7 / 3) ** 2) / 2), 12);
    expect(out.summary['rewards.mjs:levelOrNull']).toMatchObject({ mean: 2, count: 2 });
  });

  it('a sample whose rewards are all null sums to 0 and is counted', async () => {
    const r = new RewardRunner(pool, { rewards: [{ module: MOD, export: 'levelOrNull' }] });
    const out = await r.score(input);
    expect(out.total).toEqual([1, 0, 3]);
    expect(out.allNullSamples).toBe(1);
  });

  it('built-ins: accuracy (answer extraction), format regex, DAPO overlong, reverse_digits', async () => {
    const r = new RewardRunner(pool, {
      rewards: [
        { builtin: 'accuracy', column: 'answer' },
        { builtin: 'format', pattern: 'The answer is .*' },
        { builtin: 'overlong', max_completion_length: 4, cacheLength: 2 },
      ],
    });
    const out = await r.score(input);
    expect(out.perReward['accuracy']).toEqual([1, 1, 0]);
    expect(out.perReward['format']).toEqual([1, 0, 0]);
    // L_max=4, L_cache=2: L=4 -> (2-4)/2 = -1; L=2 -> 0; L=1 -> 0
    expect(out.perReward['overlong']).toEqual([-1, 0, 0]);
    expect(out.total).toEqual([1 + 1 - 1, 1 + 0 + 0, 0 + 0 + 0]);
  });

  it('reverse_digits gives the synthetic task scores', async () => {
    const problems = Array.from({ length: 6 }, (_, i) => makeProblem(7, i));
    const prompts = problems.map((p) => p.prompt);
    const completions = problems.map((p, i) => (i % 2 === 0 ? p.answer : [...p.answer.slice(0, 2), 5, 6]));
    const r = new RewardRunner(pool, { rewards: [{ builtin: 'reverse_digits' }] });
    const out = await r.score({
      prompts: prompts.map(String),
      promptIds: prompts,
      completions: completions.map(String),
      completionIds: completions,
      finishReasons: prompts.map(() => 'stop'),
      columns: prompts.map(() => ({})),
    });
    const expected = scoreBatch({ prompts, completions });
    expect(out.perReward['reverse_digits']).toEqual(expected);
    expect(expected.filter((x) => x === 1).length).toBe(3);
    expect(expected[1]).toBe(digitReward(prompts[1]!, completions[1]!));
    expect(expected[1]).toBeLessThan(1);
  });

  it('a throwing reward fails naming it; bad results and timeouts too', async () => {
    await expect(new RewardRunner(pool, { rewards: [{ module: MOD, export: 'boom' }] }).score(input)).rejects.toThrow(
      /Reward "rewards\.mjs:boom" \(.*rewards\.mjs:boom\) failed: kaboom in reward/,
    );
    await expect(new RewardRunner(pool, { rewards: [{ module: MOD, export: 'boom' }] }).score(input)).rejects.toBeInstanceOf(RewardError);
    await expect(new RewardRunner(pool, { rewards: [{ module: MOD, export: 'wrongLength' }] }).score(input)).rejects.toThrow(/returned 2 values for 3 samples/);
    await expect(new RewardRunner(pool, { rewards: [{ module: MOD, export: 'notFinite' }] }).score(input)).rejects.toThrow(/returned NaN for sample 0/);
    await expect(new RewardRunner(pool, { rewards: [{ module: MOD, export: 'nope' }] }).score(input)).rejects.toThrow(/no exported function "nope"/);
    const slow = new RewardRunner(pool, { rewards: [{ module: MOD, export: 'slow', name: 'sleepy' }], timeoutMs: 300 });
    const err = await slow.score(input).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    expect((err as Error).message).toMatch(/Reward "sleepy" \(.*rewards\.mjs:slow\) did not return within 300 ms/);
  });

  it('config errors are clear', () => {
    expect(() => new RewardRunner(pool, { rewards: [] })).toThrow(ConfigError);
    expect(() => new RewardRunner(pool, { rewards: [{ builtin: 'format' }] })).toThrow(/'format' needs `pattern`/);
    expect(() => new RewardRunner(pool, { rewards: [{ builtin: 'overlong', maxCompletionLength: 8 }] })).toThrow(
      /needs `maxCompletionLength` and `cacheLength`/,
    );
    expect(() => new RewardRunner(pool, { rewards: [{ builtin: 'accuracy' }, { builtin: 'accuracy' }] })).toThrow(/Two rewards are named "accuracy"/);
    expect(() => new RewardRunner(pool, { rewards: [{ module: MOD, weight: 'x' }] })).toThrow(/Invalid rewards config: rewards\.0/);
  });

  it('a reward module that does not exist fails at scoring, naming the reward', async () => {
    const r = new RewardRunner(pool, { rewards: [{ module: '/no/such/file.mjs', export: 'f' }] });
    await expect(r.score(input)).rejects.toThrow(ConfigError);
    await expect(r.score(input)).rejects.toThrow(/Reward "file\.mjs:f" \(\/no\/such\/file\.mjs:f\)/);
  });
});

describe('built-in helpers', () => {
  it('extractAnswer / normalizeAnswer', () => {
    expect(builtinRewards.extractAnswer('so \\boxed{\\frac{1}{2}} done')).toBe('\\frac{1}{2}');
    expect(builtinRewards.extractAnswer('a\n#### 12')).toBe(' 12');
    expect(builtinRewards.extractAnswer('<answer>yes</answer>')).toBe('yes');
    expect(builtinRewards.extractAnswer('1 then 2.5 then -3')).toBe('-3');
    expect(builtinRewards.normalizeAnswer(' $1,000.$ ')).toBe('1000');
    expect(builtinRewards.normalizeAnswer('2.50')).toBe('2.5');
    expect(builtinRewards.normalizeAnswer('Paris.')).toBe('paris');
  });
  it('overlongPenalty follows DAPO', () => {
    expect(builtinRewards.overlongPenalty(10, 16, 4)).toBe(0);
    expect(builtinRewards.overlongPenalty(12, 16, 4)).toBe(0);
    expect(builtinRewards.overlongPenalty(14, 16, 4)).toBe(-0.5);
    expect(builtinRewards.overlongPenalty(16, 16, 4)).toBe(-1);
    expect(builtinRewards.overlongPenalty(17, 16, 4)).toBe(-1);
  });
});
