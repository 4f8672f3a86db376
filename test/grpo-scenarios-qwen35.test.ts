/**
 * The seven-scenario GRPO smoke matrix on tiny Qwen3.5 / Qwen3.5-MoE end to end under `launch`
 * (test/fixtures/grpo/scenario.mjs with the tiny configs of test/helpers/qwen35-configs.ts), one
 * table row per scenario: placement, model, trainer → engine, full or LoRA, its purpose in its name.
 * Every run makes 2 GRPO steps with verification on: after every sync the coordinator compares exact
 * per-tensor fingerprints on every engine rank and the probe log-probs of trainer and engine, and fails
 * the run when they disagree; the test checks each step's verification and that a full sync moved the
 * whole model while a LoRA sync moved the adapters alone. megatron runs the MoE at tp1·ep2 and the
 * dense at tp2 (every GDN layer whole on both TP ranks). The seven run the engine at tp 1 (a server run
 * has two engine replicas on 2 ranks); three more rows run it at tp 2 (GDN split by heads), fed by megatron
 * and fsdp2, colocated and as one tp-2 server replica.
 *
 * Scenario 6 (Qwen3-MoE fsdp2 → engine TP 4, LoRA, 5 steps: fused expert runtime sync, processed-layout
 * writeback) is a Qwen3 scenario: it runs in test/grpo-scenarios.test.ts as
 * 'colocate MoE fsdp2 -> engine TP=4, LoRA, 5 steps'.
 *
 * The colocated runs share one launch of 2 ranks, the server runs one of 4 (test/helpers/grpo-launch.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt } from './helpers/parallel-launch.js';
import { sharedGrpoLaunch, type GrpoCase } from './helpers/grpo-launch.js';
import { grpoReady, MOE_TEXT, TEXT } from './helpers/qwen35-configs.js';
import { parseModelConfig } from '../src/model/config.js';
import { paramSpecs } from '../src/model/params.js';

let dir: string;
beforeAll(() => {
  ensureParallelBuilt();
  dir = mkdtempSync(join(tmpdir(), 'ascent-grpo-qwen35-'));
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

type Model = 'dense' | 'moe';
const MODELS = { dense: grpoReady(TEXT), moe: grpoReady(MOE_TEXT) };
// Adapters on the GDN projections (in_proj_qkv / out_proj), the gated q_proj, the MLP or shared expert
// and, on the MoE, the fused experts' down_proj.
const LORA = {
  dense: { rank: 4, alpha: 8, targetModules: ['in_proj_qkv', 'out_proj', 'q', 'o', 'up'] },
  moe: { rank: 4, alpha: 8, targetModules: ['in_proj_qkv', 'out_proj', 'q', 'v', 'shared_down'], targetParameters: ['mlp.experts.down_proj'] },
};
const MEGATRON = { dense: { strategy: 'megatron', tp: 2 }, moe: { strategy: 'megatron', tp: 1, ep: 2 } };
const FSDP2 = { strategy: 'fsdp2' };

interface Scenario {
  name: string;
  mode: 'colocate' | 'server';
  model: Model;
  trainer: Record<string, unknown>;
  lora: boolean;
  /** Engine tensor parallelism (default 1). */
  engineTp?: 1 | 2;
}

// The seven (scenario 6 is in test/grpo-scenarios.test.ts, see above).
const SEVEN: Scenario[] = [
  {
    name: '1. colocate dense megatron tp2 -> engine, full (basic dense + colocate path)',
    mode: 'colocate',
    model: 'dense',
    trainer: MEGATRON.dense,
    lora: false,
  },
  { name: '2. colocate dense megatron tp2 -> engine, LoRA (dense + LoRA weight sync)', mode: 'colocate', model: 'dense', trainer: MEGATRON.dense, lora: true },
  {
    name: '3. colocate MoE megatron ep2 -> engine, full (megatron MoE processed-layout sync)',
    mode: 'colocate',
    model: 'moe',
    trainer: MEGATRON.moe,
    lora: false,
  },
  { name: '4. colocate MoE megatron ep2 -> engine, LoRA (megatron MoE + LoRA path)', mode: 'colocate', model: 'moe', trainer: MEGATRON.moe, lora: true },
  { name: '5. colocate MoE fsdp2 -> engine, full (fused expert / pre-process layout sync)', mode: 'colocate', model: 'moe', trainer: FSDP2, lora: false },
  {
    name: '7. server MoE megatron ep2 -> standalone engine server, full (broadcast, full-reload post-processing, MoE inference)',
    mode: 'server',
    model: 'moe',
    trainer: MEGATRON.moe,
    lora: false,
  },
];
// fsdp2 paths the seven leave out: a server fed by fsdp2, and fsdp2 LoRA on Qwen3.5 (dense adapters over the
// server broadcast, the MoE's fused-expert adapters colocated).
const FSDP2_EXTRA: Scenario[] = [
  {
    name: 'server dense fsdp2 -> engine server, LoRA (fsdp2 server feed, adapter-only broadcasts)',
    mode: 'server',
    model: 'dense',
    trainer: FSDP2,
    lora: true,
  },
  { name: 'colocate MoE fsdp2 -> engine, LoRA (fsdp2 fused-expert adapters)', mode: 'colocate', model: 'moe', trainer: FSDP2, lora: true },
];

// The engine at tp 2: every GDN tensor and the gated attention split by heads on its 2 ranks, written by the
// sync from megatron's TP / EP shards and from fsdp2's flat shards.
const ENGINE_TP2: Scenario[] = [
  { name: 'colocate dense megatron tp2 -> engine tp 2, full', mode: 'colocate', model: 'dense', trainer: MEGATRON.dense, lora: false, engineTp: 2 },
  { name: 'colocate MoE fsdp2 -> engine tp 2, LoRA', mode: 'colocate', model: 'moe', trainer: FSDP2, lora: true, engineTp: 2 },
  { name: 'server MoE megatron ep2 -> one engine replica at tp 2, full', mode: 'server', model: 'moe', trainer: MEGATRON.moe, lora: false, engineTp: 2 },
];

/** fp32 bytes of the whole model: what a full sync moves; an adapter-only sync moves far less. */
const modelBytes = (model: Model) => paramSpecs(parseModelConfig(MODELS[model])).reduce((n, p) => n + 4 * p.shape.reduce((a, b) => a * b, 1), 0);

interface StepLog {
  step: number;
  verified: { checksums: boolean; fingerprints: number; maxLogprobDiff: number } | null;
  syncBytes: number;
  rewardMean: number;
}

function scenarioCase(s: Scenario): GrpoCase {
  const trainer = { ...s.trainer, ...(s.lora ? { lora: LORA[s.model] } : {}) };
  return {
    key: s.name,
    cfg: {
      mode: s.mode,
      modelConfig: MODELS[s.model],
      trainer,
      engine: { tp: s.engineTp ?? 1 },
      steps: 2,
      promptsPerStep: 4,
      numGenerations: 4,
      maxNewTokens: 8,
      seed: 3,
      log: join(dir, `${s.name.replace(/\W+/g, '-')}.jsonl`),
      progress: false,
      sync: { verify: true, tolerance: 1e-3, bucketBytes: 65536 },
    },
  };
}

// Server: 2 trainer ranks + 2 engine ranks (two tp-1 replicas or one tp-2); colocate: 2 ranks sharing both roles.
const ALL = (): Scenario[] => [...SEVEN, ...FSDP2_EXTRA, ...ENGINE_TP2];
const colocated = sharedGrpoLaunch(
  2,
  () =>
    ALL()
      .filter((s) => s.mode === 'colocate')
      .map(scenarioCase),
  400_000,
);
const servers = sharedGrpoLaunch(
  4,
  () =>
    ALL()
      .filter((s) => s.mode === 'server')
      .map(scenarioCase),
  400_000,
);

async function runScenario(s: Scenario): Promise<void> {
  const { run: r, result } = await (s.mode === 'server' ? servers : colocated)(s.name);
  expect(r.stderr, r.stdout.slice(-3000)).toBe('');
  expect(r.code).toBe(0);
  expect(result, r.stdout.slice(-3000)).toBeDefined();
  const res = result as unknown as { steps: number; log: StepLog[] };
  expect(res.steps).toBe(2);
  expect(res.log.map((l) => l.step)).toEqual([1, 2]);
  for (const l of res.log) {
    expect(l.verified, `step ${l.step}`).not.toBeNull();
    expect(l.verified!.checksums).toBe(true);
    expect(l.verified!.fingerprints).toBeGreaterThan(0);
    expect(l.verified!.maxLogprobDiff).toBeLessThan(1e-3);
    // LoRA runs sync the adapters alone (the base went over once, before step 1); full runs the whole model.
    if (s.lora) {
      expect(l.syncBytes).toBeGreaterThan(0);
      expect(l.syncBytes).toBeLessThan(modelBytes(s.model) / 4);
    } else expect(l.syncBytes).toBeGreaterThanOrEqual(modelBytes(s.model));
    expect(Number.isFinite(l.rewardMean)).toBe(true);
  }
}

describe('GRPO seven-scenario matrix, Qwen3.5 (launch, verified syncs)', () => {
  for (const s of SEVEN) it(s.name, () => runScenario(s), 420_000);
});

describe('GRPO fsdp2 on Qwen3.5 beyond the seven (launch, verified syncs)', () => {
  for (const s of FSDP2_EXTRA) it(s.name, () => runScenario(s), 420_000);
});

describe('GRPO on Qwen3.5 with the engine at tp 2 (launch, verified syncs)', () => {
  for (const s of ENGINE_TP2) it(s.name, () => runScenario(s), 420_000);
});
