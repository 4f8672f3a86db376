/**
 * The GRPO scenario matrix (issue #6) end to end under `launch`: trainer strategy →
 * weight sync → engine, full and LoRA, dense and MoE, colocate and server, each for a
 * few GRPO steps with verification on: after every sync the coordinator compares exact
 * per-tensor fingerprints on every engine rank (full syncs: with the trainers'; LoRA
 * adapter syncs: untouched tensors and base copies with the last full sync) and the
 * log-probs of a probe batch computed by the trainer and by the engine, and fails the
 * run when they disagree (so a finished run with verified syncs is the assertion). Also: checkpoint + resume continues the same run.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';

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

describe('GRPO scenario matrix (launch, verified syncs)', () => {
  for (const s of SCENARIOS) {
    it(
      s.name,
      async () => {
        const log = join(dir, `${s.name.replace(/\W+/g, '-')}.jsonl`);
        const cfg = {
          ...s.cfg,
          steps: s.steps,
          promptsPerStep: 4,
          numGenerations: 4,
          maxNewTokens: 8,
          seed: 3,
          log,
          progress: false,
          sync: { verify: true, tolerance: 1e-3, bucketBytes: 65536 },
        };
        const r = await launchFixture(s.nproc, 'test/fixtures/grpo/scenario.mjs', [JSON.stringify(cfg)], {}, 170_000);
        expect(r.stderr, r.stdout.slice(-3000)).toBe('');
        expect(r.code).toBe(0);
        const res = r.results[0] as unknown as {
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
      180_000,
    );
  }
});

describe('GRPO checkpoint and resume', () => {
  it('a run stopped after step 2 and resumed gives the same steps 3-4 (rewards, loss, KL to the same reference) as an uninterrupted run', async () => {
    const base = {
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
    const straight = join(dir, 'straight.jsonl');
    const a = await launchFixture(2, 'test/fixtures/grpo/scenario.mjs', [JSON.stringify({ ...base, steps: 4, log: straight })], {}, 170_000);
    expect(a.code, a.stderr).toBe(0);
    const ck = join(dir, 'ckpt');
    const resumed = join(dir, 'resumed.jsonl');
    const b1 = await launchFixture(
      2,
      'test/fixtures/grpo/scenario.mjs',
      [JSON.stringify({ ...base, steps: 2, log: resumed, checkpoint: { dir: ck, every: 1 } })],
      {},
      170_000,
    );
    expect(b1.code, b1.stderr).toBe(0);
    const b2 = await launchFixture(
      2,
      'test/fixtures/grpo/scenario.mjs',
      [JSON.stringify({ ...base, steps: 4, log: resumed, checkpoint: { dir: ck, every: 1 }, resume: true })],
      {},
      170_000,
    );
    expect(b2.code, b2.stderr).toBe(0);
    const ra = a.results[0] as unknown as { log: Array<{ step: number; rewardMean: number; loss: number; kl: number }> };
    const rb = b2.results[0] as unknown as { startStep: number; log: Array<{ step: number; rewardMean: number; loss: number; kl: number }> };
    expect(rb.startStep).toBe(2);
    expect(rb.log.map((l) => l.step)).toEqual([1, 2, 3, 4]);
    for (let i = 0; i < 4; i++) {
      expect(rb.log[i]!.rewardMean, `step ${i + 1}`).toBe(ra.log[i]!.rewardMean);
      expect(rb.log[i]!.loss).toBeCloseTo(ra.log[i]!.loss, 6);
      expect(rb.log[i]!.kl, `kl at step ${i + 1}`).toBeCloseTo(ra.log[i]!.kl, 9);
    }
    expect(ra.log[3]!.kl).toBeGreaterThan(0);
  }, 300_000);
});

describe('GRPO options and the quickstart entry', () => {
  it('a MoE model with output_router_logits trains GRPO with the router aux loss: every step logs auxLoss; off, none is logged', async () => {
    const moe = JSON.parse(readFileSync(new URL('../examples/models/tiny-moe/config.json', import.meta.url), 'utf8')) as Record<string, unknown>;
    const run = async (on: boolean) => {
      const log = join(dir, `aux-${on}.jsonl`);
      const cfg = {
        mode: 'colocate',
        modelConfig: { ...moe, output_router_logits: on, router_aux_loss_coef: 0.01 },
        trainer: { strategy: 'fsdp2' },
        engine: { tp: 1 },
        steps: 2,
        promptsPerStep: 2,
        numGenerations: 4,
        maxNewTokens: 8,
        seed: 3,
        log,
        progress: false,
        sync: { verify: true, tolerance: 1e-3 },
      };
      const r = await launchFixture(2, 'test/fixtures/grpo/scenario.mjs', [JSON.stringify(cfg)], {}, 170_000);
      expect(r.code, r.stderr).toBe(0);
      return (r.results[0] as unknown as { log: Array<{ step: number; auxLoss?: number; verified: { checksums: boolean } | null }> }).log;
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
  }, 360_000);

  it('beta > 0: KL to the reference (the policy after the warm-up) is 0 at step 1 and positive once the policy moved', async () => {
    const log = join(dir, 'kl.jsonl');
    const cfg = {
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
      log,
      progress: false,
    };
    const r = await launchFixture(2, 'test/fixtures/grpo/scenario.mjs', [JSON.stringify(cfg)], {}, 170_000);
    expect(r.code, r.stderr).toBe(0);
    const steps = (r.results[0] as unknown as { log: Array<{ kl: number }> }).log;
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
    expect(help.stdout).toMatch(/Usage: grpo[\s\S]*--engine-tp <n>/);
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
