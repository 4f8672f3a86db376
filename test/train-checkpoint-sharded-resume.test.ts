/**
 * Resuming a training checkpoint under fsdp2 (dp4) and megatron (tp2 × ep2) goes through the
 * sharded loader (test/fixtures/train/resume-sharded.mjs on 4 real ranks under launch):
 * parameters, both AdamW moments and the step count come back bit for bit and the next step
 * equals the uninterrupted run's; each rank keeps from the files exactly its share of the
 * state under the strategy's placements (the whole-state path kept all of it on every rank;
 * LoRA runs: the frozen base in pieces, the small adapters and their moments whole);
 * an optimizer tensor of the wrong shape stops every rank with one CheckpointFormatError
 * naming it, in both load modes.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';

const FIXTURE = 'test/fixtures/train/resume-sharded.mjs';
const BUCKET = 64 * 1024;
const ENV = { HCCL_EXEC_TIMEOUT: '20' };
let dir: string;
beforeAll(() => {
  ensureParallelBuilt();
  dir = mkdtempSync(join(tmpdir(), 'ascent-resume-sharded-'));
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Result {
  rank: number;
  exact: Record<string, boolean>;
  steps: number[];
  nextExact: boolean;
  hostBytes: number;
  share: number;
  fullBytes: number;
  error?: { name: string; message: string };
}

const CASES = [
  ['fsdp2', 'rank0-broadcast'],
  ['megatron:2:2', 'rank0-broadcast'],
  ['fsdp2', 'every-rank-reads'],
  // LoRA: the frozen base in pieces, the adapters and their moments whole (they are small).
  ['fsdp2:1:1:lora', 'rank0-broadcast'],
  ['megatron:2:2:lora', 'rank0-broadcast'],
] as const;

/**
 * Every case runs in one launch of 4 ranks (the fixture runs them in turn, each with strategies
 * and folders of its own, and tags each RESULT with the case's index): starting the ranks costs
 * more than a case. The misshapen load at the end of a case fails on every rank through the
 * agreement and leaves the world usable, as the next case's success shows.
 */
let launched: Promise<LaunchRun> | undefined;
async function runCase(index: number): Promise<LaunchRun> {
  launched ??= launchFixture(4, FIXTURE, [dir, String(BUCKET), JSON.stringify(CASES)], ENV, 400_000);
  const run = await launched;
  return { ...run, results: run.results.filter((x) => x.case === index) };
}

describe('resume through the sharded loader (fsdp2, megatron, LoRA on both)', () => {
  for (const [index, [spec, mode]] of CASES.entries()) {
    it(`${spec} (${mode}): exact state and next step; each rank keeps its share only; a misshapen moment stops every rank`, async () => {
      const r = await runCase(index);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      const results = r.results as unknown as Result[];
      expect(results.map((x) => x.rank)).toEqual([0, 1, 2, 3]);
      for (const x of results) {
        expect(x.exact, `rank ${x.rank}`).toEqual({ params: true, exp_avg: true, exp_avg_sq: true });
        expect(x.steps).toEqual([2, 2]);
        expect(x.nextExact, `rank ${x.rank}`).toBe(true);
        // Exactly its pieces of params, m and v; far from the whole state every rank used to hold.
        expect(x.hostBytes, `rank ${x.rank}`).toBe(x.share);
        // fsdp2 dp4: a quarter of every tensor; tp2 × ep2: half of attention and experts, norms, router and embeddings whole.
        expect(x.share).toBeLessThan(x.fullBytes * (spec.startsWith('fsdp2') ? 0.3 : 0.55));
        expect(x.error?.name, `rank ${x.rank}`).toBe('CheckpointFormatError');
        expect(x.error!.message).toContain('exp_avg_sq.');
        expect(x.error!.message).toMatch(
          spec.endsWith(':lora')
            ? /"exp_avg_sq\.model\.layers\.1\.self_attn\.q_proj\.lora_A\.weight" \(in model\.safetensors\) has shape \[5, 128\], expected \[4, 128\]/
            : /"model\.layers\.1\.self_attn\.o_proj\.weight" \(in model\.safetensors\) has shape \[129, 128\], expected \[128, 128\]/,
        );
      }
    }, 420_000);
  }
});
