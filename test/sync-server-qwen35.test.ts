/**
 * Server-mode weight sync for Qwen3.5 and Qwen3.5-MoE on 4 real ranks
 * (test/fixtures/sync/server-qwen35.mjs under launch): fsdp2 dp2 trainer ranks 0-1 broadcast to
 * two engine replicas at tp 1, or one engine at tp 2 whose GDN layers are split by heads (ranks
 * 2-3), through the same planner as Qwen3 (no per-model code: the slots say where every region
 * goes). A full sync after a training step is verified (fingerprints of every HF tensor on both
 * engine ranks + probe log-probs) and equals, checksum for checksum, an engine reloaded from the
 * trainers' gatherState('params'). With LoRA (adapters on the GDN projections, gated q_proj and
 * the MLP or shared expert / fused experts), a base-only sync is caught by verification, and an
 * adapter-only sync is verified, rewrites the GDN and attention weights the adapters touch and
 * runs no post-load processing. The four cases (model x engine layout) run one after the other
 * in one launch of 4 ranks (starting the ranks costs more than a case); each test reads its
 * case's RESULT lines.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';
import { MOE_TEXT, TEXT } from './helpers/qwen35-configs.js';
import { parseModelConfig } from '../src/model/config.js';
import { paramSpecs } from '../src/model/params.js';

beforeAll(() => ensureParallelBuilt(), 120_000);

const GDN = ['in_proj_qkv', 'in_proj_z', 'in_proj_b', 'in_proj_a', 'out_proj'];
const CASES = {
  dense: { text: TEXT, lora: { rank: 4, alpha: 8, targetModules: [...GDN, 'q', 'o', 'gate', 'up', 'down'], seed: 5 } },
  moe: {
    text: MOE_TEXT,
    lora: {
      rank: 4,
      alpha: 8,
      targetModules: [...GDN, 'q', 'v', 'shared_gate', 'shared_up', 'shared_down'],
      targetParameters: ['mlp.experts.gate_up_proj', 'mlp.experts.down_proj'],
      seed: 5,
    },
  },
} as const;

const LAYOUTS = [
  ['2 engine replicas at tp 1', 1],
  ['one engine at tp 2', 2],
] as const;
const keyOf = (which: string, tp: number) => `${which} tp ${tp}`;
let shared: Promise<LaunchRun> | undefined;
/** The one launch running every case, started when the first test asks for it. */
function sharedRun(): Promise<LaunchRun> {
  const cases = (['dense', 'moe'] as const).flatMap((which) =>
    LAYOUTS.map(([, tp]) => ({ key: keyOf(which, tp), text: CASES[which].text, lora: CASES[which].lora, tp })),
  );
  shared ??= launchFixture(4, 'test/fixtures/sync/server-qwen35.mjs', [JSON.stringify(cases)], {}, 400_000);
  return shared;
}

interface Report {
  kind: string;
  mode: string;
  verified: { checksums: boolean; fingerprints: number; maxLogprobDiff: number };
}
interface RankOut {
  rank: number;
  trainer: boolean;
  full: { report: Report | null; error: unknown; tensors: number; sameChecksums?: boolean; maxDiff?: number };
  lora: { baseOnly: string; report: Report | null; error: unknown; processCalls: number; changed?: string[]; adapters?: number };
}

describe.each(['dense', 'moe'] as const)('server-mode sync, qwen3.5 %s: fsdp2 dp2 → engine ranks 2-3', (which) => {
  it.each(LAYOUTS)(
    '%s: full sync verified and equal to a reload; LoRA adapter-only sync verified, no post-load processing',
    async (_, tp) => {
      const { text } = CASES[which];
      const run = await sharedRun();
      expect(run.code, run.stderr.slice(-3000)).toBe(0);
      const results = run.results.filter((r) => r.key === keyOf(which, tp)) as unknown as RankOut[];
      expect(results.map((r) => r.rank)).toEqual([0, 1, 2, 3]);
      const tensors = paramSpecs(parseModelConfig(text), { expertLayout: 'fused' }).length;
      const adapters = results[0]!.lora.adapters!;
      expect(adapters).toBeGreaterThan(0);
      for (const r of results) {
        const { full, lora: l } = r;
        expect(full.error, `rank ${r.rank}`).toBeNull();
        expect(full.report!.mode).toBe('server');
        expect(full.report!.kind).toBe('full');
        expect(full.report!.verified.checksums).toBe(true);
        // Every HF tensor was fingerprinted on both engine ranks.
        expect(full.report!.verified.fingerprints).toBe(2 * tensors);
        expect(full.report!.verified.maxLogprobDiff).toBeLessThan(1e-4);
        // Without the adapters the engine disagrees with the LoRA trainer, so verification fails everywhere.
        expect(l.baseOnly, `rank ${r.rank}`).toBe('ASCENT_WEIGHT_SYNC');
        expect(l.error, `rank ${r.rank}`).toBeNull();
        expect(l.report!.kind).toBe('adapter');
        expect(l.report!.verified.checksums).toBe(true);
        expect(l.report!.verified.fingerprints).toBeGreaterThan(0);
        expect(l.report!.verified.maxLogprobDiff).toBeLessThan(1e-4);
        expect(l.processCalls).toBe(0);
        if (r.trainer) continue;
        expect(full.sameChecksums, `engine rank ${r.rank}: checksums equal a reload from gatherState`).toBe(true);
        expect(full.maxDiff).toBeLessThan(1e-6);
        expect(l.changed).toContain('model.layers.0.linear_attn.in_proj_qkv.weight');
        expect(l.changed).toContain('model.layers.2.linear_attn.out_proj.weight');
        expect(l.changed).toContain('model.layers.3.self_attn.qkv_proj.weight');
        expect(l.changed).not.toContain('model.embed_tokens.weight');
      }
    },
    410_000,
  );
});
