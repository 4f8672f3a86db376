/**
 * The user-facing GRPO run: flags for the model folder, dataset, rewards and tokenizer,
 * `--set` for any other key, TRL's snake_case names accepted in a config, and `ascent grpo`
 * launching the packaged entry (help, and a bad flag as one line before any rank starts).
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkGrpoArgs, grpoConfigFromArgs, grpoMain, grpoUsage } from '../src/grpo/cli.js';
import type { RankContext } from '../src/runtime/actor-system/rank-context.js';
import { applyTrlAliases } from '../src/grpo/aliases.js';
import { parseGrpoConfig } from '../src/grpo/config.js';
import { ROOT } from './helpers/parallel-launch.js';

describe('GRPO flags and config names', () => {
  it('maps the BYO flags and --set onto the config', () => {
    const c = grpoConfigFromArgs([
      '--model',
      'm',
      '--dataset',
      'train.jsonl',
      '--max-prompt-length',
      '128',
      '--eval-dataset',
      'eval.jsonl',
      '--eval-every',
      '5',
      '--reward',
      './r.mjs#exact',
      '--reward',
      './r.mjs#brevity:-0.5',
      '--reward',
      'builtin:accuracy:2',
      '--tokenizer',
      'tok',
      '--init',
      'checkpoint',
      '--mask-truncated-completions',
      '--set',
      'lossType=grpo',
      '--set',
      'dataset.epochs=3',
      '--set',
      'rolloutCorrection={"mode":"token_mask","cap":3}',
    ]) as Record<string, unknown>;
    expect(c).toMatchObject({
      model: 'm',
      init: 'checkpoint',
      dataset: { path: 'train.jsonl', maxPromptLength: 128, epochs: 3 },
      eval: { dataset: 'eval.jsonl', every: 5 },
      tokenizer: { path: 'tok' },
      rewards: [
        { module: './r.mjs', export: 'exact', weight: 1 },
        { module: './r.mjs', export: 'brevity', weight: -0.5 },
        { builtin: 'accuracy', weight: 2 },
      ],
      maskTruncatedCompletions: true,
      lossType: 'grpo',
      rolloutCorrection: { mode: 'token_mask', cap: 3 },
    });
    expect(() => grpoConfigFromArgs(['--reward', 'r.mjs'])).toThrow(/--reward "r\.mjs": expected MODULE#EXPORT\[:WEIGHT\]/);
    expect(() => grpoConfigFromArgs(['--set', 'lossType'])).toThrow(/expected KEY=VALUE/);
  });

  it("accepts TRL's snake_case names (nested where ours are) and refuses a key given twice", () => {
    const input = {
      model: 'm',
      num_generations: 4,
      max_completion_length: 16,
      learning_rate: 1e-4,
      epsilon_high: 0.3,
      loss_type: 'dr_grpo',
      num_iterations: 2,
      lr_scheduler_type: 'cosine',
      warmup_ratio: 0.1,
      optimizer: { weightDecay: 0 },
    };
    const out = applyTrlAliases(input) as Record<string, unknown>;
    expect(out).toEqual({
      model: 'm',
      numGenerations: 4,
      maxNewTokens: 16,
      optimizer: { weightDecay: 0, lr: 1e-4 },
      clipHigh: 0.3,
      lossType: 'dr_grpo',
      numIterations: 2,
      lrScheduler: { type: 'cosine', warmupRatio: 0.1 },
    });
    expect(input.optimizer).toEqual({ weightDecay: 0 }); // the caller's object is untouched
    const cfg = parseGrpoConfig({ ...input, promptsPerStep: 4 }, 2);
    expect([cfg.numGenerations, cfg.optimizer.lr, cfg.lossType, cfg.lrScheduler.type]).toEqual([4, 1e-4, 'dr_grpo', 'cosine']);
    expect(() => applyTrlAliases({ num_generations: 4, numGenerations: 8 })).toThrow(/num_generations \(TRL's name\) and numGenerations both set the same key/);
  });

  it('ascent grpo prints its usage, and a bad flag is one line with exit 2 before any rank starts', () => {
    const bin = join(ROOT, 'bin', 'ascent.mjs');
    const help = spawnSync(process.execPath, [bin, 'grpo', '--help'], { encoding: 'utf8' });
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/Usage: ascent grpo \[--nproc N\][\s\S]*--dataset <file>[\s\S]*--reward <module#export\[:weight\]>/);
    const bad = spawnSync(process.execPath, [bin, 'grpo', '--nproc', '2', '--model', join(ROOT, 'examples/models/tiny-dense'), '--set', 'lossType=mean'], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/lossType/);
    expect(bad.stderr.trim().split('\n').length).toBe(1);
  });

  it('--help: validateArgs resolves to the usage for launch to print; grpoMain inside a rank still prints it from rank 0', async () => {
    expect(await checkGrpoArgs({ args: ['--steps', '2', '--help'], worldSize: 16 })).toEqual({ stdout: grpoUsage() });
    expect(grpoUsage()).toMatch(/^Usage: grpo \[options\]\n/);
    const said: string[] = [];
    const ctx = { args: ['-h'], log: { leader: (msg: string) => said.push(msg) } } as unknown as RankContext;
    expect(await grpoMain(ctx)).toBeNull();
    expect(said).toEqual([grpoUsage()]);
  });
});
