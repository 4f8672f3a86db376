/**
 * Weight-sync verification cannot be fooled (test/fixtures/sync/inject.mjs): for colocate
 * (fsdp2 dp2 → one engine of tp 2 on the same 2 ranks) and server (fsdp2 dp2 → two engine
 * replicas of tp 2 on 4 more ranks) × tiny dense and tiny MoE, faults are injected into
 * the real sync path on ONE engine rank at a time, rotating over every engine rank
 * (replicas included): transposed w13 / w2, swapped gate/up, wrong TP slice, a skipped
 * (stale) tensor, one element +1e-3 (three different tensors), one tensor × 1.001 and
 * processing twice (MoE; dense processing is the identity, and a second processing is
 * refused). The sync runs with verify: true (fingerprints, no probe). Every injection must
 * be caught on every rank with a WeightSyncError naming the tensor, the engine rank that
 * holds it and both fingerprints; clean syncs before and after must pass.
 * Dense and MoE of one mode run one after the other in one launch (starting 2 or 6 ranks costs
 * more than a model's injections); each test reads its model's RESULT lines.
 */
import { describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';

const MODELS = ['dense', 'moe'] as const;
const launches = new Map<string, Promise<LaunchRun>>();
/** The launch of `mode` running both models, started when its first test asks for it. */
function launchOf(mode: 'colocate' | 'server', nproc: number): Promise<LaunchRun> {
  let run = launches.get(mode);
  if (!run) {
    ensureParallelBuilt();
    run = launchFixture(nproc, 'test/fixtures/sync/inject.mjs', [mode, ...MODELS], {}, 200_000);
    launches.set(mode, run);
  }
  return run;
}

interface Case {
  name: string;
  target: number | null;
  tensor?: string;
  ok: boolean;
  code?: string;
  message?: string;
  details?: { tensor?: string; engineRank?: number; engineFingerprint?: string; trainerFingerprint?: string; failures?: string[] } | null;
  verified?: { checksums: boolean; fingerprints: number } | null;
}

describe.each([
  ['colocate', 2],
  ['server', 6],
] as const)('%s sync verification under fault injection', (mode, nproc) => {
  it.each(MODELS)(
    'tiny %s: every injection is caught on every rank, naming the tensor and the engine rank',
    async (which) => {
      const run = await launchOf(mode, nproc);
      expect(run.code, run.stderr).toBe(0);
      // One RESULT per rank for each model.
      expect(run.results.length).toBe(nproc * MODELS.length);
      const results = run.results.filter((r) => r.which === which);
      expect(results.map((r) => r.rank)).toEqual(Array.from({ length: nproc }, (_, r) => r));
      const engineRanks = results[0]!.engineRanks as number[];
      expect(engineRanks.length).toBe(mode === 'colocate' ? 2 : 4);
      const injected = new Set<string>();
      const targets = new Set<number>();
      for (const r of results) {
        const cases = r.cases as Case[];
        expect(cases.length, `rank ${r.rank}`).toBe(which === 'moe' ? 12 : 11);
        for (const c of cases) {
          const tag = `${mode} ${which} rank ${r.rank}: ${c.name}`;
          if (c.target === null) {
            expect(c.ok, `${tag}: ${c.message}`).toBe(true);
            expect(c.verified!.checksums, tag).toBe(true);
            expect(c.verified!.fingerprints, tag).toBeGreaterThan(0);
            continue;
          }
          injected.add(c.name);
          targets.add(c.target);
          expect(c.ok, `${tag}: not caught`).toBe(false);
          expect(c.code, tag).toBe('ASCENT_WEIGHT_SYNC');
          expect(c.details!.tensor, tag).toBe(c.tensor);
          expect(c.details!.engineRank, tag).toBe(c.target);
          expect(c.details!.engineFingerprint, tag).toMatch(/^[0-9a-f]{16}$/);
          expect(c.details!.trainerFingerprint, tag).toMatch(/^[0-9a-f]{16}$/);
          expect(c.details!.engineFingerprint, tag).not.toBe(c.details!.trainerFingerprint);
          expect(c.message, tag).toContain(`engine rank ${c.target} `);
          expect(c.message, tag).toContain(c.tensor!);
          // Only the faulty rank differs.
          expect(c.details!.failures!.length, tag).toBe(1);
        }
        if (which === 'dense' && r.isEngine) expect(r.secondProcess, `rank ${r.rank}`).toBe('ASCENT_WEIGHT_LAYOUT');
      }
      const kinds = [
        'swapped gate/up',
        'wrong TP slice',
        'skipped tensor (stale)',
        'one element +1e-3 (a)',
        'one element +1e-3 (b)',
        'one element +1e-3 (c)',
        'one tensor x1.001',
      ];
      kinds.push(
        ...(which === 'moe' ? ['transposed expert w13', 'transposed expert w2', 'processing twice'] : ['transposed gate_up (w13)', 'transposed down (w2)']),
      );
      expect(injected).toEqual(new Set(kinds));
      expect(targets, 'every engine rank had a fault injected').toEqual(new Set(engineRanks));
    },
    210_000,
  );
});
