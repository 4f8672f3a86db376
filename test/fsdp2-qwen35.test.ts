/**
 * fsdp2 trains Qwen3.5 (tied embeddings, a right-padded row) and Qwen3.5-MoE (untied, shared
 * expert) on 2 real ranks (test/fixtures/train/fsdp2-qwen35.mjs under launch) as the single-device
 * strategy does. The model folders are the hub's multimodal layout: nested text_config,
 * `model.language_model.*` names, a vision-tower and an MTP tensor the text model drops; the MoE
 * experts per expert (the loader fuses each rank's). Checked:
 * - the initial weights through the sharded loader equal the values written, bit for bit; every
 *   parameter is one weight source, identity-mapped, Shard(0), holding this rank's rows;
 * - 3 clipped AdamW steps: per-step loss and norm, the first step's gradients and both moments,
 *   the parameters after the last within 1e-5 relative per tensor (the Qwen3 fsdp2 test's
 *   tolerance and what it compares after which step);
 * - saveCheckpoint + loadCheckpoint (sharded loader) round trip: bit for bit, next step equal;
 * - LoRA on the GDN projections, gated attention, MLP / shared expert and fused experts: loss,
 *   adapter gradients and adapters after a step within 1e-5, the base untouched.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';
import { HUB_MODELS, writeHubModel, type HubModel } from './helpers/qwen35-hub.js';
import { parseModelConfig } from '../src/model/config.js';
import { paramSpecs } from '../src/model/params.js';

const FIXTURE = 'test/fixtures/train/fsdp2-qwen35.mjs';
const TOL = 1e-5;
const ENV = { HCCL_EXEC_TIMEOUT: '20' };
const dir = mkdtempSync(join(tmpdir(), 'ascent-fsdp2-qwen35-'));

const MODELS = HUB_MODELS;
type Which = HubModel;
const cfgOf = (which: Which) => parseModelConfig(MODELS[which]);

const dirs = {} as Record<Which, string>;
beforeAll(async () => {
  ensureParallelBuilt();
  for (const which of ['dense', 'moe'] as const) dirs[which] = await writeHubModel(dir, which);
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

type Worst = { name: string; err: number | string };
const below = (w: Worst, what: string) => {
  expect(typeof w.err, `${what}: ${w.name} ${String(w.err)}`).toBe('number');
  expect(w.err as number, `${what}: worst ${w.name}`).toBeLessThan(TOL);
};

function ranksOk(run: LaunchRun): Array<Record<string, any>> {
  expect(run.code, run.stderr).toBe(0);
  expect(run.results.map((r) => r.rank)).toEqual([0, 1]);
  return run.results as Array<Record<string, any>>;
}

describe.each(['dense', 'moe'] as const)('fsdp2 dp2 on qwen3_5 %s', (which) => {
  const count = () => paramSpecs(cfgOf(which)).length;

  it('loads the hub checkpoint through the sharded loader and takes 3 AdamW steps as single does', async () => {
    const run = await launchFixture(2, FIXTURE, [dirs[which], 'equiv'], ENV, 120_000);
    const results = ranksOk(run);
    // The vision tower and MTP head are dropped, said once (rank 0).
    expect(run.stderr.match(/skipped 1 model\.visual\.\* tensor and 1 mtp\.\* tensor/g)?.length).toBe(1);
    const [r0] = results;
    expect(r0!.initMismatch).toEqual([]);
    expect(r0!.initExtra).toEqual([]);
    expect(r0!.lossRel).toHaveLength(3);
    for (const e of [...r0!.lossRel, ...r0!.normRel]) expect(e).toBeLessThan(TOL);
    below(r0!.gradErr, 'grads of step 1');
    for (const kind of ['params', 'exp_avg', 'exp_avg_sq']) below(r0![`err:${kind}`], kind);
    for (const r of results) {
      expect(r.layout).toBe('dp2');
      expect(r.steps).toBe(3);
      expect(r.sourceKeys).toEqual(r.specNames);
      expect(r.sourceKeys).toHaveLength(count());
      expect(r.badSources, `rank ${r.rank}`).toEqual([]);
      for (const kind of ['params', 'exp_avg', 'exp_avg_sq']) expect(r[`count:${kind}`]).toBe(count());
      // Every rank saw the same global losses and norms, and training moved the loss.
      expect(r.losses).toEqual(r0!.losses);
      expect(r.norms).toEqual(r0!.norms);
    }
    expect(r0!.losses[2]).not.toBe(r0!.losses[0]);
  }, 150_000);

  it('saveCheckpoint + loadCheckpoint round trip is exact and the next step matches', async () => {
    const root = join(dir, `ckpt-${which}`);
    const results = ranksOk(await launchFixture(2, FIXTURE, [dirs[which], 'ckpt', root], ENV, 120_000));
    for (const r of results) {
      expect(r.differedBefore).toBe(true);
      expect(r.sizes).toEqual({ params: count(), exp_avg: count(), exp_avg_sq: count() });
      expect(r.exact, `rank ${r.rank}`).toEqual({ params: true, exp_avg: true, exp_avg_sq: true });
      expect(r.steps).toEqual([2, 2]);
      expect(r.nextExact, `rank ${r.rank}`).toBe(true);
      // Its own rows only (about half; a 1-row tensor such as shared_expert_gate sits on rank 0).
      expect(r.hostShare).toBeGreaterThan(0.3);
      expect(r.hostShare).toBeLessThan(0.65);
    }
  }, 150_000);

  it('LoRA: one step equals the single strategy, only the adapters move', async () => {
    const results = ranksOk(await launchFixture(2, FIXTURE, [dirs[which], 'lora'], ENV, 120_000));
    const [r0] = results;
    expect(r0!.lossRel).toBeLessThan(TOL);
    below(r0!.gradErr, 'adapter grads');
    below(r0!.adapterErr, 'adapters after the step');
    for (const r of results) {
      expect(r.adapterNames.length).toBeGreaterThan(10);
      expect(r.gradNames, `rank ${r.rank}: gradients of the adapters only`).toEqual(r.adapterNames);
      expect(r.moved, `rank ${r.rank}: every adapter moved`).toBe(r.adapterNames.length);
      expect(r.baseExact, `rank ${r.rank}: base weights bit-identical`).toBe(true);
      expect(r.loss).toBe(r0!.loss);
    }
  }, 150_000);
});
