/**
 * The GRPO scenario matrix (issue #6) end to end under `launch`: trainer strategy →
 * weight sync → engine, full and LoRA, dense and MoE, colocate and server, each for a
 * few GRPO steps with verification on: after every sync the coordinator compares exact
 * per-tensor fingerprints on every engine rank (full syncs: with the trainers'; LoRA
 * adapter syncs: untouched tensors and base copies with the last full sync) and the
 * log-probs of a probe batch computed by the trainer and by the engine, and fails the
 * run when they disagree (so a finished run with verified syncs is the assertion). Also: checkpoint + resume continues the same run.
 * The runs that need the same number of ranks share a launch (test/helpers/grpo-launch.ts): one
 * world of 2 ranks, one of 4; the resumed run starts a world of its own, as a resume does.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';
import { sharedGrpoLaunch, type GrpoCase } from './helpers/grpo-launch.js';

let dir: string;
beforeAll(() => {
  ensureParallelBuilt();
  dir = mkdtempSync(join(tmpdir(), 'ascent-grpo-'));
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const LORA_DENSE = { rank: 4, alpha: 8, targetModules: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] };
const LORA_MOE = { rank: 4, alpha: 8, targetModules: ['q', 'v', 'o'], targetParameters: ['mlp.experts.gate_up_proj', 'mlp.experts.down_proj'] };

const SCENARIOS = [
  {
    name: 'colocate dense megatron -> engine, full',
    nproc: 2,
    steps: 2,
    cfg: { mode: 'colocate', model: 'dense', trainer: { strategy: 'megatron', tp: 2 }, engine: { tp: 2 } },
  },
  {
    name: 'colocate dense megatron -> engine, LoRA',
    nproc: 2,
    steps: 2,
    cfg: { mode: 'colocate', model: 'dense', trainer: { strategy: 'megatron', tp: 2, lora: LORA_DENSE }, engine: { tp: 1 } },
  },
  {
    name: 'colocate MoE megatron -> engine (processed layout), full',
    nproc: 2,
    steps: 2,
    cfg: { mode: 'colocate', model: 'moe', trainer: { strategy: 'megatron', tp: 2 }, engine: { tp: 2 } },
  },
  {
    name: 'colocate MoE megatron -> engine, LoRA',
    nproc: 2,
    steps: 2,
    cfg: { mode: 'colocate', model: 'moe', trainer: { strategy: 'megatron', tp: 1, ep: 2, lora: LORA_MOE }, engine: { tp: 2 } },
  },
  {
    name: 'colocate MoE fsdp2 (fused experts) -> engine, full',
    nproc: 2,
    steps: 2,
    cfg: { mode: 'colocate', model: 'moe', trainer: { strategy: 'fsdp2' }, engine: { tp: 1 } },
  },
  {
    name: 'colocate MoE fsdp2 -> engine TP=4, LoRA, 5 steps',
    nproc: 4,
    steps: 5,
    cfg: { mode: 'colocate', model: 'moe', trainer: { strategy: 'fsdp2', lora: LORA_MOE }, engine: { tp: 4 } },
  },
  {
    name: 'server MoE megatron -> standalone server (broadcast, full reload, post-load)',
    nproc: 4,
    steps: 2,
    cfg: { mode: 'server', model: 'moe', trainer: { strategy: 'megatron', tp: 2 }, engine: { tp: 2 } },
  },
  {
    name: 'server dense fsdp2 -> standalone server, LoRA (adapter-only syncs)',
    nproc: 4,
    steps: 2,
    cfg: { mode: 'server', model: 'dense', trainer: { strategy: 'fsdp2', lora: LORA_DENSE }, engine: { tp: 2 } },
  },
] as const;

const matrixCase = (s: (typeof SCENARIOS)[number]): GrpoCase => ({
  key: s.name,
  cfg: {
    ...s.cfg,
    steps: s.steps,
    promptsPerStep: 4,
    numGenerations: 4,
    maxNewTokens: 8,
    seed: 3,
    log: join(dir, `${s.name.replace(/\W+/g, '-')}.jsonl`),
    progress: false,
    sync: { verify: true, tolerance: 1e-3, bucketBytes: 65536 },
  },
});

const moeConfig = JSON.parse(readFileSync(new URL('../examples/models/tiny-moe/config.json', import.meta.url), 'utf8')) as Record<string, unknown>;
const auxCase = (on: boolean): GrpoCase => ({
  key: `aux ${on}`,
  cfg: {
    mode: 'colocate',
    modelConfig: { ...moeConfig, output_router_logits: on, router_aux_loss_coef: 0.01 },
    trainer: { strategy: 'fsdp2' },
    engine: { tp: 1 },
    steps: 2,
    promptsPerStep: 2,
    numGenerations: 4,
    maxNewTokens: 8,
    seed: 3,
    log: join(dir, `aux-${on}.jsonl`),
    progress: false,
    sync: { verify: true, tolerance: 1e-3 },
  },
});

const RESUME_BASE = {
  mode: 'server',
  model: 'dense',
  trainer: { strategy: 'fsdp2' },
  promptsPerStep: 4,
  numGenerations: 4,
  maxNewTokens: 8,
  seed: 5,
  progress: false,
  beta: 0.1,
  optimizer: { lr: 1e-2 },
  sftWarmup: { steps: 5, batch: 16 },
};

const klCase = (): GrpoCase => ({
  key: 'kl',
  cfg: {
    mode: 'server',
    model: 'dense',
    trainer: { strategy: 'fsdp2' },
    steps: 2,
    promptsPerStep: 2,
    numGenerations: 8,
    maxNewTokens: 8,
    beta: 0.1,
    optimizer: { lr: 1e-2 },
    sftWarmup: { steps: 10, batch: 16 },
    log: join(dir, 'kl.jsonl'),
    progress: false,
  },
});

// Every 2-rank run, in the order the tests ask for them; the run stopped after step 2 is the
// last, its resume starts a world of its own below.
const twoRanks = sharedGrpoLaunch(
  2,
  () => [
    ...SCENARIOS.filter((s) => s.nproc === 2).map(matrixCase),
    { key: 'straight', cfg: { ...RESUME_BASE, steps: 4, log: join(dir, 'straight.jsonl') } },
    auxCase(true),
    auxCase(false),
    klCase(),
    { key: 'stopped', cfg: { ...RESUME_BASE, steps: 2, log: join(dir, 'resumed.jsonl'), checkpoint: { dir: join(dir, 'ckpt'), every: 1 } } },
  ],
  400_000,
);
const fourRanks = sharedGrpoLaunch(4, () => SCENARIOS.filter((s) => s.nproc === 4).map(matrixCase), 400_000);

describe('GRPO scenario matrix (launch, verified syncs)', () => {
  for (const s of SCENARIOS) {
    it(
      s.name,
      async () => {
        const { run: r, result } = await (s.nproc === 2 ? twoRanks : fourRanks)(s.name);
        expect(r.stderr, r.stdout.slice(-3000)).toBe('');
        expect(r.code).toBe(0);
        expect(result, r.stdout.slice(-3000)).toBeDefined();
        const res = result as unknown as {
          steps: number;
          log: Array<{
            step: number;
            verified: { checksums: boolean; fingerprints: number; maxLogprobDiff: number } | null;
            syncBytes: number;
            rewardMean: number;
          }>;
        };
        expect(res.steps).toBe(s.steps);
        expect(res.log.map((l) => l.step)).toEqual(Array.from({ length: s.steps }, (_, i) => i + 1));
        for (const l of res.log) {
          expect(l.verified, `step ${l.step}`).not.toBeNull();
          expect(l.verified!.checksums).toBe(true);
          // Exact fingerprints were compared on every engine rank (LoRA: against the last full sync).
          expect(l.verified!.fingerprints).toBeGreaterThan(0);
          expect(l.verified!.maxLogprobDiff).toBeLessThan(1e-3);
          expect(l.syncBytes).toBeGreaterThan(0);
          expect(Number.isFinite(l.rewardMean)).toBe(true);
        }
      },
      420_000,
    );
  }
});

describe('GRPO checkpoint and resume', () => {
  it('a run stopped after step 2 and resumed gives the same steps 3-4 (rewards, loss, KL to the same reference) as an uninterrupted run', async () => {
    const a = await twoRanks('straight');
    expect(a.run.code, a.run.stderr).toBe(0);
    expect(a.result, a.run.stderr).toBeDefined();
    const b1 = await twoRanks('stopped');
    expect(b1.run.code, b1.run.stderr).toBe(0);
    expect(b1.result, b1.run.stderr).toBeDefined();
    const b2 = await launchFixture(
      2,
      'test/fixtures/grpo/scenario.mjs',
      [JSON.stringify({ ...RESUME_BASE, steps: 4, log: join(dir, 'resumed.jsonl'), checkpoint: { dir: join(dir, 'ckpt'), every: 1 }, resume: true })],
      {},
      170_000,
    );
    expect(b2.code, b2.stderr).toBe(0);
    const ra = a.result as unknown as { log: Array<{ step: number; rewardMean: number; loss: number; kl: number }> };
    const rb = b2.results[0] as unknown as { startStep: number; log: Array<{ step: number; rewardMean: number; loss: number; kl: number }> };
    expect(rb.startStep).toBe(2);
    expect(rb.log.map((l) => l.step)).toEqual([1, 2, 3, 4]);
    for (let i = 0; i < 4; i++) {
      expect(rb.log[i]!.rewardMean, `step ${i + 1}`).toBe(ra.log[i]!.rewardMean);
      expect(rb.log[i]!.loss).toBeCloseTo(ra.log[i]!.loss, 6);
      expect(rb.log[i]!.kl, `kl at step ${i + 1}`).toBeCloseTo(ra.log[i]!.kl, 9);
    }
    expect(ra.log[3]!.kl).toBeGreaterThan(0);
  }, 420_000);
});

describe('GRPO options and the quickstart entry', () => {
  it('a MoE model with output_router_logits trains GRPO with the router aux loss: every step logs auxLoss; off, none is logged', async () => {
    const run = async (on: boolean) => {
      const { run: r, result } = await twoRanks(`aux ${on}`);
      expect(r.code, r.stderr).toBe(0);
      expect(result, r.stderr).toBeDefined();
      return (result as unknown as { log: Array<{ step: number; auxLoss?: number; verified: { checksums: boolean } | null }> }).log;
    };
    const on = await run(true);
    expect(on.map((l) => l.step)).toEqual([1, 2]);
    for (const l of on) {
      // E * sum f*P over the top-2 choices: near 2 when balanced, never 0 or NaN.
      expect(l.auxLoss, `step ${l.step}`).toBeGreaterThan(0.5);
      expect(l.auxLoss).toBeLessThan(8 * 2);
      expect(l.verified!.checksums).toBe(true);
    }
    const off = await run(false);
    for (const l of off) expect(l.auxLoss).toBeUndefined();
  }, 420_000);

  it('beta > 0: KL to the reference (the policy after the warm-up) is 0 at step 1 and positive once the policy moved', async () => {
    const { run: r, result } = await twoRanks('kl');
    expect(r.code, r.stderr).toBe(0);
    expect(result, r.stderr).toBeDefined();
    const steps = (result as unknown as { log: Array<{ kl: number }> }).log;
    expect(steps[0]!.kl).toBeLessThan(1e-6);
    expect(steps[1]!.kl).toBeGreaterThan(1e-6);
  }, 180_000);

  it('examples/grpo.ts runs as the README shows (short run), and bad flags are clear errors', async () => {
    const ok = await launchFixture(
      4,
      'examples/grpo.ts',
      ['--steps', '2', '--sft-warmup', '2', '--prompts', '2', '--generations', '2', '--no-progress'],
      {},
      170_000,
    );
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/step 2\/2 reward/);
    expect(ok.stdout).toMatch(/phase[\s\S]*generate[\s\S]*sync[\s\S]*total/);
    const help = await launchFixture(2, 'examples/grpo.ts', ['--help'], {}, 60_000);
    expect(help.code).toBe(0);
    // Answered by validateArgs in the launcher: no rank started (its lines would carry "[rank N] ").
    expect(help.stdout).toMatch(/^Usage: grpo \[options\]\n[\s\S]*--engine-tp <n>/);
    expect(help.stdout).not.toMatch(/\[rank \d+\]/);
    const bad = await launchFixture(2, 'examples/grpo.ts', ['--engine-tp', '3'], {}, 60_000);
    // A bad flag is a usage error found by the entry's validateArgs in the launcher, before any
    // rank starts: one line naming the field and the value received, exit 2, no rank output.
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(
      /^launch: Invalid GRPO config: engine\.tp: expected engine\.tp to be 1, 2 or 4 \(received 3\) \(checked before starting the ranks\)$/m,
    );
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
    expect(bad.stdout).not.toMatch(/\[rank \d+\]/);
    // --resume with a folder holding no checkpoint is refused the same way.
    const empty = mkdtempSync(join(tmpdir(), 'ascent-resume-empty-'));
    const resume = await launchFixture(2, 'examples/grpo.ts', ['--resume', '--checkpoint-dir', empty], {}, 60_000);
    rmSync(empty, { recursive: true, force: true });
    expect(resume.code).toBe(2);
    expect(resume.stderr).toMatch(/^launch: GRPO: --resume: the checkpoint folder .* \(checked before starting the ranks\)$/m);
  }, 240_000);
});
