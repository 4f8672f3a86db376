/**
 * The GRPO scenario matrix for Qwen3.5 and Qwen3.5-MoE end to end under `launch`
 * (test/fixtures/grpo/scenario.mjs with the tiny configs of test/helpers/qwen35-configs.ts):
 * fsdp2 trainer → weight sync → engine at tp 1, every combination of colocate (2 ranks) / server
 * (2 trainer + 2 engine ranks), dense / MoE and full / LoRA (adapters on the GDN projections
 * in_proj_qkv / out_proj and the gated q_proj), 2 GRPO steps each with verification on: after every sync the coordinator
 * compares exact per-tensor fingerprints on every engine rank and the probe log-probs of trainer
 * and engine, and fails the run when they disagree. megatron trainers too: the MoE at tp1·ep2,
 * the dense at tp2 (GDN layers whole on every TP rank), full weights, 2 verified steps each.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';
import { grpoReady, MOE_TEXT, TEXT } from './helpers/qwen35-configs.js';
import { parseModelConfig } from '../src/model/config.js';
import { paramSpecs } from '../src/model/params.js';

let dir: string;
beforeAll(() => {
  ensureParallelBuilt();
  dir = mkdtempSync(join(tmpdir(), 'ascent-grpo-qwen35-'));
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const MODELS = { dense: grpoReady(TEXT), moe: grpoReady(MOE_TEXT) };
const LORA = {
  dense: { rank: 4, alpha: 8, targetModules: ['in_proj_qkv', 'out_proj', 'q', 'o', 'up'] },
  moe: { rank: 4, alpha: 8, targetModules: ['in_proj_qkv', 'out_proj', 'q', 'v', 'shared_down'], targetParameters: ['mlp.experts.down_proj'] },
};

// Every combination: colocate on 2 ranks, server on 2 trainer + 2 engine ranks (two replicas).
const SCENARIOS = (['colocate', 'server'] as const).flatMap((mode) =>
  (['dense', 'moe'] as const).flatMap((model) =>
    [false, true].map((lora) => ({
      name: `${mode} qwen3.5 ${model} fsdp2 -> engine tp 1${mode === 'server' ? ' (2 replicas)' : ''}, ${lora ? 'LoRA' : 'full'}`,
      nproc: mode === 'server' ? 4 : 2,
      mode,
      model,
      lora,
    })),
  ),
);
/** fp32 bytes of the whole model: what a full sync moves; an adapter-only sync moves far less. */
const modelBytes = (model: 'dense' | 'moe') => paramSpecs(parseModelConfig(MODELS[model])).reduce((n, p) => n + 4 * p.shape.reduce((a, b) => a * b, 1), 0);

function runCfg(name: string, extra: Record<string, unknown>): Record<string, unknown> {
  return {
    steps: 2,
    promptsPerStep: 4,
    numGenerations: 4,
    maxNewTokens: 8,
    seed: 3,
    log: join(dir, `${name.replace(/\W+/g, '-')}.jsonl`),
    progress: false,
    sync: { verify: true, tolerance: 1e-3, bucketBytes: 65536 },
    ...extra,
  };
}

describe('GRPO scenario matrix, Qwen3.5 (launch, verified syncs)', () => {
  for (const s of SCENARIOS) {
    it(
      s.name,
      async () => {
        const trainer = { strategy: 'fsdp2', ...(s.lora ? { lora: LORA[s.model] } : {}) };
        const cfg = runCfg(s.name, { mode: s.mode, modelConfig: MODELS[s.model], trainer, engine: { tp: 1 } });
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
        expect(res.steps).toBe(2);
        expect(res.log.map((l) => l.step)).toEqual([1, 2]);
        for (const l of res.log) {
          expect(l.verified, `step ${l.step}`).not.toBeNull();
          expect(l.verified!.checksums).toBe(true);
          expect(l.verified!.fingerprints).toBeGreaterThan(0);
          expect(l.verified!.maxLogprobDiff).toBeLessThan(1e-3);
          expect(l.syncBytes).toBeGreaterThan(0);
          // LoRA runs sync the adapters alone (the base went over once, before step 1); full runs the whole model.
          if (s.lora) expect(l.syncBytes).toBeLessThan(modelBytes(s.model) / 4);
          else expect(l.syncBytes).toBeGreaterThanOrEqual(modelBytes(s.model));
          expect(Number.isFinite(l.rewardMean)).toBe(true);
        }
      },
      180_000,
    );
  }

  // megatron trains Qwen3.5 too: the MoE with its experts over 2 EP ranks, the dense with full attention and
  // the MLP over 2 TP ranks (every GDN layer whole on both); the engine at tp 1, syncs verified as above.
  it.each([
    ['moe', { strategy: 'megatron', tp: 1, ep: 2 }],
    ['dense', { strategy: 'megatron', tp: 2 }],
  ] as const)(
    'colocate qwen3.5 %s megatron %o -> engine tp 1, full',
    async (model, trainer) => {
      const cfg = runCfg(`megatron-${model}`, { mode: 'colocate', modelConfig: MODELS[model], trainer, engine: { tp: 1 } });
      const r = await launchFixture(2, 'test/fixtures/grpo/scenario.mjs', [JSON.stringify(cfg)], {}, 170_000);
      expect(r.stderr, r.stdout.slice(-3000)).toBe('');
      expect(r.code).toBe(0);
      const res = r.results[0] as unknown as {
        steps: number;
        log: Array<{ step: number; verified: { checksums: boolean; fingerprints: number; maxLogprobDiff: number } | null; syncBytes: number }>;
      };
      expect(res.steps).toBe(2);
      expect(res.log.map((l) => l.step)).toEqual([1, 2]);
      for (const l of res.log) {
        expect(l.verified, `step ${l.step}`).not.toBeNull();
        expect(l.verified!.checksums).toBe(true);
        expect(l.verified!.fingerprints).toBeGreaterThan(0);
        expect(l.verified!.maxLogprobDiff).toBeLessThan(1e-3);
        expect(l.syncBytes).toBeGreaterThanOrEqual(modelBytes(model));
      }
    },
    180_000,
  );
});
