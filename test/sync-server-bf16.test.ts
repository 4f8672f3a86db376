/**
 * Server-mode weight sync into 'bfloat16' engines on 4 real ranks
 * (test/fixtures/sync/server.mjs with bfloat16): the engine ranks send their precision with
 * the source exchange, the trainer ranks cast their pieces of the matmul weights to bf16
 * before broadcasting, so the sync moves half their bytes; each engine rank's bytes equal a
 * bf16 engine reloaded from the trainers' gatherState('params'), the fingerprints (bf16
 * cast of the trainer's weights vs the engine's bf16) match, and one changed bf16 weight
 * on engine rank 3 fails the next sync's verification on every rank, naming the tensor.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt } from './helpers/parallel-launch.js';
import { SERVER_SYNC_CASES, sharedServerSync } from './helpers/sync-server-launch.js';
import { loadModelConfig } from '../src/model/config.js';
import { paramSpecs } from '../src/model/params.js';

beforeAll(() => ensureParallelBuilt());

// The cases below run one after the other in one launch of 4 ranks; each test reads its own case's results.
const serverSync = sharedServerSync('bfloat16');

/** fp32 bytes of the HF tensors, and of those a bf16 engine keeps fp32 (norms, router). */
function sizes(which: string): { fp32: number; kept: number; tensors: number } {
  const specs = paramSpecs(loadModelConfig(`examples/models/tiny-${which}/config.json`), { expertLayout: 'fused' });
  const bytes = (s: { shape: number[] }) => s.shape.reduce((a, b) => a * b, 1) * 4;
  return {
    fp32: specs.reduce((a, s) => a + bytes(s), 0),
    kept: specs.filter((s) => /norm\.weight$|\.mlp\.gate\.weight$/.test(s.name)).reduce((a, s) => a + bytes(s), 0),
    tensors: specs.length,
  };
}

describe('server-mode sync into bfloat16 engines, 2 trainer ranks → 2 engine ranks (tp 2)', () => {
  it.each(SERVER_SYNC_CASES)(
    'tiny %s from %s, bucket %i bytes: bf16 bytes equal a bf16 reload, half the bytes, a changed bf16 weight is caught',
    async (which, kind, bucket) => {
      const run = await serverSync(which, kind, bucket);
      expect(run.code, run.stderr).toBe(0);
      expect(run.results.map((r) => r.rank)).toEqual([0, 1, 2, 3]);
      const z = sizes(which);
      for (const r of run.results as Array<Record<string, any> & { rank: number }>) {
        const tag = `rank ${r.rank}`;
        expect(r.error, tag).toBeNull();
        expect(r.report.dtype, tag).toBe('bfloat16');
        expect(r.report.bytes, tag).toBe((z.fp32 - z.kept) / 2 + z.kept);
        expect(r.report.bytes, tag).toBeLessThan(0.51 * z.fp32);
        expect(r.report.verified.checksums, tag).toBe(true);
        expect(r.report.verified.fingerprints, tag).toBe(2 * z.tensors);
        expect(r.report.verified.maxLogprobDiff, tag).toBeLessThan(0.1);
        expect(r.flipped?.code, tag).toBe('ASCENT_WEIGHT_SYNC');
        expect(r.flipped.message, tag).toMatch(
          /engine rank 3 \(tp rank 1\) holds model\.layers\.1\.self_attn\.o_proj\.weight with fingerprint [0-9a-f]{16} but the trainer's is/,
        );
        expect(r.flipped.message, tag).not.toMatch(/engine rank 2/);
        if (!r.trainer) {
          expect(r.leftOpen, tag).toBe(false);
          expect(r.got, tag).toEqual(r.want);
          expect(r.maxDiff, tag).toBeLessThan(1e-4);
          expect(r.syncProcessCount, tag).toBe(1);
        }
      }
    },
    // The first test waits for the launch running all four cases.
    230_000,
  );
});
