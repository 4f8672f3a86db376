/**
 * The GRPO algorithm options end to end under `launch` (2 ranks, colocate fsdp2, the tiny
 * dense model): one update per rollout keeps every ratio at exactly 1 without the trainer's
 * extra forward pass; numIterations = 2 with two mini-batches of two accumulated micro-batches
 * takes 4 optimizer steps per rollout on old log-probs computed once, so ratios leave 1 and
 * the surrogate clips; the other variants (grpo loss, batch reward scaling, GSPO, KL in the
 * reward, rollout correction, a cosine schedule with warm-up) run and log what they imply; the
 * entropy bonus logs the exact entropy next to the sampled-token estimate. The runs share one
 * launch of 2 ranks (test/helpers/grpo-launch.ts), one after another in the same world.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt } from './helpers/parallel-launch.js';
import { sharedGrpoLaunch } from './helpers/grpo-launch.js';
import { lrAt } from '../src/train/lr-schedule.js';

let dir: string;
beforeAll(() => {
  ensureParallelBuilt();
  dir = mkdtempSync(join(tmpdir(), 'ascent-grpo-alg-'));
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

type Eval = { step: number; rewardMean: number; exactFraction: number; samples: number; temperature: number };
type Step = {
  step: number;
  lr: number;
  clipFraction: number;
  ratioMean: number;
  optimizerSteps: number;
  recomputedOld: boolean;
  kl: number;
  engineTrainerLogprobDiff: number;
  isWeightMean: number;
  rewardMean: number;
  loss: number;
  entropy: number;
  entropyExact?: number;
};

const WARM = { sftWarmup: { steps: 60, batch: 32, lr: 5e-3 } };
// name → (config beyond the common one, steps), in the order the tests ask for them.
const RUNS: Record<string, [Record<string, unknown>, number]> = {
  default: [{}, 3],
  entropy: [{ entropyCoeff: 0.01 }, 3],
  mu2: [{ numIterations: 2, stepsPerGeneration: 2, gradientAccumulationSteps: 2, optimizer: { lr: 2e-2 } }, 3],
  // The default warm-up and optimizer (undefined leaves the key out of the JSON config).
  eval: [{ sftWarmup: undefined, optimizer: undefined, eval: { every: 2, prompts: 6, numGenerations: 4 } }, 3],
  // A long warm-up makes the policy confident, so many groups come out flat.
  'no-ds': [WARM, 3],
  ds: [{ ...WARM, dynamicSampling: { maxRounds: 2 } }, 3],
  // Near-greedy sampling: the samples of a prompt are identical, so every group is flat.
  'all-flat': [{ temperature: 0.001, dynamicSampling: { maxRounds: 1 } }, 2],
  variants: [
    {
      lossType: 'grpo',
      scaleRewards: 'batch',
      importanceSamplingLevel: 'sequence',
      beta: 0.05,
      klInReward: true,
      klEstimator: 'k2',
      rolloutCorrection: { mode: 'token_truncate', cap: 2 },
      numIterations: 2,
      lrScheduler: { type: 'cosine', warmupSteps: 2 },
    },
    3,
  ],
};

const launch = sharedGrpoLaunch(
  2,
  () =>
    Object.entries(RUNS).map(([name, [extra, steps]]) => ({
      key: name,
      cfg: {
        mode: 'colocate',
        model: 'dense',
        trainer: { strategy: 'fsdp2' },
        steps,
        promptsPerStep: 4,
        numGenerations: 4,
        maxNewTokens: 8,
        seed: 5,
        log: join(dir, `${name}.jsonl`),
        progress: false,
        sftWarmup: { steps: 20, batch: 32, lr: 5e-3 },
        optimizer: { lr: 5e-3 },
        ...extra,
      },
    })),
  400_000,
);

async function run(name: keyof typeof RUNS): Promise<Step[]> {
  const { run: r, result } = await launch(name);
  expect(r.stderr, r.stdout.slice(-3000)).toBe('');
  expect(r.code).toBe(0);
  expect(result, r.stdout.slice(-3000)).toBeDefined();
  return (result as unknown as { log: Step[] }).log;
}

describe('GRPO algorithm options (launch)', () => {
  it('one update per rollout: ratio exactly 1, no clipping, no recomputed old log-probs', async () => {
    const log = await run('default');
    for (const l of log) {
      expect(l.optimizerSteps).toBe(1);
      expect(l.recomputedOld).toBe(false);
      expect(l.ratioMean).toBe(1);
      expect(l.clipFraction).toBe(0);
      // Trainer and engine agree on the sampled tokens' log-probs (the sync is exact).
      expect(l.engineTrainerLogprobDiff).toBeLessThan(1e-4);
      // No entropy bonus: the exact entropy is not computed.
      expect(l.entropyExact).toBeUndefined();
    }
  }, 420_000);

  it('the entropy bonus logs the exact entropy beside the sampled-token estimate', async () => {
    const log = await run('entropy');
    for (const l of log) {
      // The tiny model's vocabulary has 64 tokens: 0 < H <= log 64.
      expect(l.entropyExact).toBeGreaterThan(0);
      expect(l.entropyExact).toBeLessThanOrEqual(Math.log(64));
      // One update per rollout: the trainer's policy is the sampling policy, so the sampled-token estimate
      // (a mean of -log p over 4 x 4 x <= 8 sampled tokens) estimates the same number.
      expect(Math.abs(l.entropy - l.entropyExact!)).toBeLessThan(0.5 * l.entropyExact! + 0.1);
    }
  }, 420_000);

  it('numIterations 2 x stepsPerGeneration 2 x gradientAccumulationSteps 2: 4 optimizer steps on old log-probs computed once; ratios move and the surrogate clips', async () => {
    const log = await run('mu2');
    for (const l of log) {
      expect(l.optimizerSteps).toBe(4);
      expect(l.recomputedOld).toBe(true);
      expect(l.ratioMean).not.toBe(1);
    }
    expect(Math.max(...log.map((l) => l.clipFraction))).toBeGreaterThan(0);
  }, 420_000);

  it('evaluation on held-out prompts every k steps (and after the last), greedy, logged apart', async () => {
    const log = join(dir, 'eval.jsonl');
    const { run: r } = await launch('eval');
    await run('eval');
    const { readRunLog } = await import('../src/grpo/run-log.js');
    const evals = readRunLog(log).evals as unknown as Eval[];
    expect(evals.map((e) => e.step)).toEqual([2, 3]);
    for (const e of evals) {
      expect(e.samples).toBe(24); // 6 prompts x 4 samples: more than a training batch of a replica (16 rows)
      expect(e.temperature).toBe(0);
      expect(e.rewardMean).toBeGreaterThanOrEqual(0);
      expect(e.exactFraction).toBeLessThanOrEqual(1);
    }
    expect(r.stdout).toMatch(/eval at step 2: reward [\d.]+ \(exact [\d.]+%\) over 24 samples of 6 held-out prompts/);
    // Step records stay step records.
    expect(readRunLog(log).steps.map((s) => s.step)).toEqual([1, 2, 3]);
  }, 420_000);

  it('dynamic sampling trains only on groups whose rewards differ, refilling from extra rounds; without it flat groups reach the loss', async () => {
    type DS = Step & { trainedGroups: number; trainedFlatGroups: number; droppedGroups: number; samplingRounds: number };
    const plain = (await run('no-ds')) as DS[];
    expect(plain.reduce((a, l) => a + l.trainedFlatGroups, 0)).toBeGreaterThan(0);
    const ds = (await run('ds')) as DS[];
    for (const l of ds) {
      expect(l.trainedFlatGroups).toBe(0);
      expect(l.trainedGroups).toBeGreaterThan(0);
      expect(l.trainedGroups).toBeLessThanOrEqual(4);
      expect((l.trainedGroups * 4) % 2).toBe(0); // rows split over the 2 data-parallel ranks
    }
    expect(ds.reduce((a, l) => a + l.droppedGroups, 0)).toBeGreaterThan(0);
    expect(Math.max(...ds.map((l) => l.samplingRounds))).toBeGreaterThan(1);
  }, 420_000);

  it('when every group is flat even after resampling, the step takes no update (a colocated engine is not put to sleep) and the run goes on', async () => {
    const log = (await run('all-flat')) as Array<Step & { samplingRounds: number; droppedGroups: number }>;
    expect(log.map((l) => l.step)).toEqual([1, 2]);
    for (const l of log) {
      expect(l.optimizerSteps).toBe(0);
      expect(l.samplingRounds).toBe(2);
      expect(l.droppedGroups).toBe(8);
    }
  }, 420_000);

  it('grpo loss, batch scaling, GSPO, KL in the reward, rollout correction and a cosine schedule run and log their effects', async () => {
    const log = await run('variants');
    const schedule = { kind: 'cosine' as const, lr: 5e-3, warmupSteps: 2, totalSteps: 6 };
    // Two optimizer steps per rollout: step s logs the lr of its second one, index 2s - 1.
    log.forEach((l) => expect(l.lr).toBeCloseTo(lrAt(schedule, 2 * l.step - 1), 12));
    for (const l of log) {
      expect(l.optimizerSteps).toBe(2);
      expect(Number.isFinite(l.loss)).toBe(true);
      expect(l.isWeightMean).toBeGreaterThan(0);
      expect(l.isWeightMean).toBeLessThanOrEqual(2);
    }
    expect(log[0]!.kl).toBe(0); // the reference is the policy as RL starts
  }, 420_000);
});
