/**
 * Colocated weight sync of Qwen3.5 and Qwen3.5-MoE into an engine of tp 2 on 2 real ranks
 * (test/fixtures/sync/colocate-qwen35.mjs under launch): fsdp2 dp2 → the engine's GDN layers
 * split by heads, through the same planner as every model (only the slots say that a rank holds
 * three regions of in_proj_qkv / conv1d). A full sync after a training step is verified
 * (fingerprints of every HF tensor on both engine ranks + probe log-probs), equals, checksum for
 * checksum, an engine of tp 2 reloaded from gatherState('params'), and runs no post-load
 * processing; one wrong element in the k channels of a GDN in_proj_qkv on engine rank 1 is
 * caught by verification naming that tensor (every region of a rank is fingerprinted, not
 * only its first); a LoRA adapter-only sync is verified and rewrites the adapted GDN weights.
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
      targetParameters: ['mlp.experts.gate_up_proj'],
      seed: 5,
    },
  },
} as const;

interface Verified {
  checksums: boolean;
  fingerprints: number;
  maxLogprobDiff: number;
}
interface Report {
  kind: string;
  mode: string;
  verified: Verified;
}
interface Failure {
  code: string;
  message: string;
}
interface RankOut {
  rank: number;
  full: {
    report: Report | null;
    error: Failure | null;
    processCalls: number;
    sameChecksums: boolean;
    maxDiff: number;
    fault: Failure | null;
    afterFault: Failure | null;
  };
  lora: { baseError: Failure | null; report: Report | null; error: Failure | null; processCalls: number; changed: string[]; adapters: number };
}

// Dense and MoE run one after the other in one launch of 2 ranks (starting the ranks costs more
// than a case); each test reads its own model's RESULT lines.
let shared: Promise<LaunchRun> | undefined;
const sharedRun = () =>
  (shared ??= launchFixture(
    2,
    'test/fixtures/sync/colocate-qwen35.mjs',
    [JSON.stringify((['dense', 'moe'] as const).map((key) => ({ key, ...CASES[key] })))],
    {},
    240_000,
  ));

describe.each(['dense', 'moe'] as const)('colocated sync, qwen3.5 %s: fsdp2 dp2 → engine tp 2 (GDN split by heads)', (which) => {
  it('full sync verified and equal to a reload; a wrong k channel is caught; LoRA adapter-only sync verified', async () => {
    const { text } = CASES[which];
    const run = await sharedRun();
    expect(run.code, run.stderr.slice(-3000)).toBe(0);
    const results = run.results.filter((r) => r.key === which) as unknown as RankOut[];
    expect(results.map((r) => r.rank)).toEqual([0, 1]);
    const tensors = paramSpecs(parseModelConfig(text), { expertLayout: 'fused' }).length;
    for (const { rank, full, lora: l } of results) {
      expect(full.error, `rank ${rank}`).toBeNull();
      expect([full.report!.mode, full.report!.kind]).toEqual(['colocate', 'full']);
      expect(full.report!.verified.checksums).toBe(true);
      // Every HF tensor was fingerprinted on both engine TP ranks.
      expect(full.report!.verified.fingerprints).toBe(2 * tensors);
      expect(full.report!.verified.maxLogprobDiff).toBeLessThan(1e-4);
      expect(full.processCalls).toBe(0);
      expect(full.sameChecksums, `rank ${rank}: checksums equal a tp-2 reload from gatherState`).toBe(true);
      expect(full.maxDiff).toBeLessThan(1e-6);
      // The same verdict on both ranks, naming the tensor and the engine rank.
      expect(full.fault?.code).toBe('ASCENT_WEIGHT_SYNC');
      expect(full.fault!.message).toMatch(/engine rank 1 \(tp rank 1\) holds model\.layers\.0\.linear_attn\.in_proj_qkv\.weight with fingerprint/);
      expect(full.fault!.message).not.toMatch(/engine rank 0/);
      expect(full.afterFault).toBeNull();

      expect(l.baseError).toBeNull();
      expect(l.error).toBeNull();
      expect(l.report!.kind).toBe('adapter');
      expect(l.report!.verified.checksums).toBe(true);
      expect(l.report!.verified.maxLogprobDiff).toBeLessThan(1e-4);
      expect(l.processCalls).toBe(0);
      expect(l.adapters).toBeGreaterThan(0);
      for (const gdn of GDN) expect(l.changed).toContain(`model.layers.0.linear_attn.${gdn}.weight`);
      expect(l.changed).toContain('model.layers.3.self_attn.qkv_proj.weight');
      expect(l.changed).not.toContain('model.embed_tokens.weight');
      expect(l.changed).not.toContain('model.layers.0.linear_attn.conv1d.weight');
    }
  }, 250_000);
});
