/**
 * Server-mode weight sync on 4 real ranks (test/fixtures/sync/server.mjs): trainer ranks
 * 0-1 (megatron tp2, megatron dp2 (trainer tp != engine tp), or fsdp2 dp2) broadcast what they own as flat buckets; engine ranks
 * 2-3 (a tp = 2 server group) reload through the loader and process exactly once. Each
 * engine rank's checksums equal an engine reloaded from the trainers' gatherState('params')
 * and its log-probs that engine's; the verification verdict (trainer vs engine log-probs
 * within 1e-4) is the same on every rank; the extra memory of trainer AND engine ranks is
 * at most two buckets (engine ranks stream received buckets into their parameters). A bucket smaller than one tensor works.
 * A sync that fails on the engine ranks before processing leaves no reload session open.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';
import { SERVER_SYNC_CASES, sharedServerSync } from './helpers/sync-server-launch.js';
import { loadModelConfig } from '../src/model/config.js';
import { paramSpecs } from '../src/model/params.js';

beforeAll(() => ensureParallelBuilt());

// The cases below run one after the other in one launch of 4 ranks; each test reads its own case's results.
const serverSync = sharedServerSync('float32');

// Canonical (HF, fused experts) tensors of the tiny models: what each engine rank fingerprints.
const canonical = (dir: string) => paramSpecs(loadModelConfig(`examples/models/${dir}/config.json`), { expertLayout: 'fused' }).length;
const MOE_TENSORS = canonical('tiny-moe');
const DENSE_TENSORS = canonical('tiny-dense');

describe('server-mode sync, 2 trainer ranks → 2 engine ranks (tp 2)', () => {
  it.each(SERVER_SYNC_CASES)(
    'tiny %s from %s, bucket %i bytes',
    async (which, kind, bucket) => {
      const run = await serverSync(which, kind, bucket);
      expect(run.code, run.stderr).toBe(0);
      expect(run.results.map((r) => r.rank)).toEqual([0, 1, 2, 3]);
      for (const r of run.results as Array<Record<string, any>>) r.tensors = which === 'moe' ? MOE_TENSORS : DENSE_TENSORS;
      const diffs = new Set<number>();
      for (const r of run.results as Array<Record<string, any> & { rank: number }>) {
        expect(r.error, `rank ${r.rank}`).toBeNull();
        expect(r.report.mode).toBe('server');
        expect(r.report.kind).toBe('full');
        expect(r.report.verified.checksums).toBe(true);
        // Fingerprints of every tensor region were compared on both engine ranks.
        expect(r.report.verified.fingerprints).toBe(2 * r.tensors);
        expect(r.report.verified.maxLogprobDiff).toBeLessThan(1e-4);
        diffs.add(r.report.verified.maxLogprobDiff);
        if (r.trainer) {
          expect(r.failed, `trainer rank ${r.rank}: the injected engine failure`).toBeNull();
          expect(r.processCalls).toBe(0);
          expect(r.report.peakExtraBytes, `trainer rank ${r.rank}`).toBeLessThanOrEqual(2 * bucket);
        } else {
          // The failed first sync threw and left no session open; only the second one processed.
          expect(r.failed).toContain('injected failure before processing');
          expect(r.leftOpen, `engine rank ${r.rank}: a session left open`).toBe(false);
          expect(r.processCalls, `engine rank ${r.rank}: post-load processing runs`).toBe(1);
          // Received buckets stream straight into the engine's parameters: two slots at most.
          expect(r.report.peakExtraBytes, `engine rank ${r.rank}`).toBeGreaterThan(0);
          // Trainer tp (1) != engine tp (2): TP-split tensors are re-cut through one scratch
          // as large as the largest of them (tiny moe: qkv [256, 128] fp32) on top of the slots.
          const assembly = kind === 'megatron-dp2' ? 256 * 128 * 4 : 0;
          expect(r.report.peakExtraBytes, `engine rank ${r.rank}`).toBeLessThanOrEqual(2 * bucket + assembly);
          expect(r.syncProcessCount).toBe(1);
          expect(Object.keys(r.got).length).toBeGreaterThan(0);
          expect(r.got).toEqual(r.want);
          expect(r.maxDiff).toBeLessThan(1e-4);
        }
      }
      expect(diffs.size, 'every rank returns the same verdict').toBe(1);
    },
    // The first test waits for the launch running all four cases.
    230_000,
  );
});

describe('server-mode LoRA adapter sync', () => {
  it('adapters alone make the engine agree with a LoRA trainer (which a base-only sync does not); no post-load processing; a drifted base weight is caught', async () => {
    const r = await launchFixture(4, 'test/fixtures/sync/server-lora.mjs', []);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    for (const x of r.results as Array<Record<string, any>>) {
      expect(x.baseOnly, `rank ${x.rank}`).toBe('ASCENT_WEIGHT_SYNC');
      expect(x.kind).toBe('adapter');
      expect(x.verified.maxLogprobDiff).toBeLessThan(1e-4);
      expect(x.bytes).toBeGreaterThan(0);
      expect(x.bytes).toBeLessThan(200_000);
      expect(x.processCalls).toBe(0);
      // Untouched tensors and the base copies equal the last verified full sync.
      expect(x.verified.checksums).toBe(true);
      expect(x.verified.fingerprints).toBeGreaterThan(0);
      // A base weight that drifted on engine rank 3 fails the next adapter sync everywhere.
      expect(x.drift?.code, `rank ${x.rank}`).toBe('ASCENT_WEIGHT_SYNC');
      expect(x.drift.tensor).toBe('model.layers.0.self_attn.o_proj.weight');
      expect(x.drift.engineRank).toBe(3);
      expect(x.drift.message).toMatch(/engine rank 3 \(tp rank 1\) holds model\.layers\.0\.self_attn\.o_proj\.weight .* base weights at the last full sync/);
    }
  }, 120_000);
});
