/**
 * megatron trains Qwen3.5 (tied embeddings, a right-padded row) and Qwen3.5-MoE (untied, shared
 * expert) on real ranks (test/fixtures/train/megatron-qwen35.mjs under launch) as the single-device
 * strategy does, from the hub's multimodal checkpoint layout (nested text_config,
 * `model.language_model.*`, a vision-tower and an MTP tensor the text model drops, per-expert MoE):
 * - dense tp1·dp2, MoE tp1·ep2, dense tp2 and MoE tp2 (full attention, the MLP and the shared
 *   expert split over tp, every GDN layer whole on both TP ranks): the sharded initial load bit for bit; every weight source's
 *   local elements are the HF elements it maps to, and the sources cover every HF tensor; 3
 *   clipped AdamW steps: per-step loss and norm, and after the first step the gradients, the
 *   parameters and both moments within 1e-5 relative per tensor (the Qwen3 megatron test's
 *   tolerance and step); under tp2 the GDN gradients are the same bits on both TP ranks;
 * - saveCheckpoint + loadCheckpoint round trip: bit for bit, the next step equal;
 * - LoRA on the GDN projections, gated attention, MLP / shared expert and fused experts: loss,
 *   adapter gradients and adapters after a step within 1e-5, the base untouched;
 * - context parallelism is refused with a ConfigError naming the GDN limit.
 * The bridge alone (host): HF → Megatron → TP shards → gather → HF is exact for both models; tp
 * must divide the shared expert's width.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';
import { HUB_MODELS, writeHubModel, type HubModel } from './helpers/qwen35-hub.js';
import { parseModelConfig } from '../src/model/config.js';
import type { HostParam } from '../src/model/param-store.js';
import { initialParams, paramSpecs } from '../src/model/params.js';
import { hfToMegatron, megatronSpecs, megatronToHf, tpGather, tpSlice } from '../src/train/megatron/bridge.js';
import { checkParallelSizes } from '../src/train/megatron/layout.js';

const FIXTURE = 'test/fixtures/train/megatron-qwen35.mjs';
const TOL = 1e-5;
const ENV = { HCCL_EXEC_TIMEOUT: '20' };
const dir = mkdtempSync(join(tmpdir(), 'ascent-megatron-qwen35-'));

const MODELS = HUB_MODELS;
type Which = HubModel;
const cfgOf = (which: Which) => parseModelConfig(MODELS[which]);
const bytes = (p: HostParam) => Buffer.from(p.data.buffer, p.data.byteOffset, p.data.byteLength);

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

function ranksOk(run: LaunchRun, n = 2): Array<Record<string, any>> {
  expect(run.code, run.stderr).toBe(0);
  expect(run.results.map((r) => r.rank)).toEqual(Array.from({ length: n }, (_, i) => i));
  return run.results as Array<Record<string, any>>;
}

describe.each(['dense', 'moe'] as const)('Megatron bridge on qwen3_5 %s (host)', (which) => {
  it.each([1, 2])('HF → Megatron → %i TP shards → gather → HF is exact; GDN tensors replicated, gated q_proj whole heads', (tp) => {
    const cfg = cfgOf(which);
    const hf = initialParams(cfg, 5);
    const meg = hfToMegatron(cfg, hf);
    const specs = megatronSpecs(cfg);
    for (const s of specs.filter((x) => /self_attention\.(in_proj_|conv1d|dt_bias|A_log|out_norm|out_proj)/.test(x.name)))
      expect(s.tp, s.name).toBe('replicated');
    const gathered = new Map<string, HostParam>();
    for (const spec of specs) {
      const shards = Array.from({ length: tp }, (_, r) => tpSlice(spec, meg.get(spec.name)!, tp, r));
      gathered.set(spec.name, tpGather(spec, shards));
    }
    const back = megatronToHf(cfg, gathered);
    expect([...back.keys()]).toEqual([...hf.keys()]);
    for (const [name, p] of hf) expect(bytes(back.get(name)!).equals(bytes(p)), name).toBe(true);
    // The full-attention layer's linear_qkv: per KV group, g heads of [query D ‖ gate D] rows, then k, then v.
    const { headDim: D, hiddenSize: H } = cfg;
    const q = hf.get('model.layers.3.self_attn.q_proj.weight')!;
    const qkv = meg.get('decoder.layers.3.self_attention.linear_qkv.weight')!;
    expect(qkv.shape).toEqual([(2 * cfg.numHeads + 2 * cfg.numKvHeads) * D, H]);
    const g = cfg.numHeads / cfg.numKvHeads;
    expect(bytes({ shape: [], data: qkv.data.subarray((2 * g + 2) * D * H, (2 * g + 2) * D * H + 2 * g * D * H) })).toEqual(
      bytes({ shape: [], data: q.data.subarray(2 * g * D * H, 4 * g * D * H) }),
    );
  });
});

describe('megatron layout checks on qwen3_5_moe (host)', () => {
  it('tp must divide the shared expert width: an error naming the field and the tps that fit', () => {
    const cfg = parseModelConfig({ ...MODELS.moe, text_config: { ...MODELS.moe.text_config, shared_expert_intermediate_size: 13 } });
    expect(() => checkParallelSizes(cfg, 2, { tp: 2 })).toThrow(/tp=2 does not divide shared_expert_intermediate_size=13\. HINT: use tp in \[1\]/);
    expect(checkParallelSizes(cfgOf('moe'), 2, { tp: 2 })).toEqual({ tp: 2, dp: 1, ep: 1 });
  });
});

describe.each([
  ['dense', 1, 1, 2, 'dp2'],
  ['moe', 1, 2, 2, 'ep2'],
  ['dense', 2, 1, 2, 'tp2'],
  ['moe', 2, 1, 2, 'tp2'],
] as const)('megatron on qwen3_5 %s tp=%i ep=%i on %i ranks (%s)', (which, tp, ep, nproc, layout) => {
  const count = () => paramSpecs(cfgOf(which)).length;
  // The three scenarios share one launch of this layout (the fixture runs them in turn, each with
  // strategies of its own): starting the ranks and loading the package cost more than a scenario.
  let launched: Promise<LaunchRun> | undefined;
  const scenario = async (name: 'equiv' | 'ckpt' | 'lora'): Promise<LaunchRun> => {
    launched ??= launchFixture(nproc, FIXTURE, [dirs[which], 'equiv,ckpt,lora', String(tp), String(ep), join(dir, `ckpt-${which}-${layout}`)], ENV, 400_000);
    const run = await launched;
    return { ...run, results: run.results.filter((r) => r.scenario === name) };
  };

  it('loads the hub checkpoint sharded, publishes exact weight sources and takes 3 AdamW steps as single does', async () => {
    const results = ranksOk(await scenario('equiv'), nproc);
    const [r0] = results;
    expect(r0!.lossRel).toHaveLength(3);
    for (const e of [...r0!.lossRel, ...r0!.normRel]) expect(e).toBeLessThan(TOL);
    below(r0!.gradErr, 'grads of step 1');
    for (const kind of ['params', 'exp_avg', 'exp_avg_sq']) below(r0![`err:${kind}`], kind);
    for (const r of results) {
      expect(r.layout).toBe(layout);
      expect(r.initMismatch, `rank ${r.rank}`).toEqual([]);
      expect(r.initExtra).toEqual([]);
      expect(r.badSources, `rank ${r.rank}`).toEqual([]);
      expect(r.uncovered, `rank ${r.rank}`).toEqual([]);
      expect(r.steps).toBe(3);
      for (const kind of ['grads', 'params', 'exp_avg', 'exp_avg_sq']) expect(r[`count:${kind}`]).toBe(count());
      expect(r.losses).toEqual(r0!.losses);
      expect(r.norms).toEqual(r0!.norms);
      // Three GDN layers of 10 tensors each (with the input norm); under tp2 the same bits on both TP ranks.
      expect(Object.keys(r.gdnHashes)).toHaveLength(30);
      if (tp > 1) expect(r.gdnHashes).toEqual(results.find((x) => x.tpRank === 0)!.gdnHashes);
    }
    expect(r0!.losses[2]).not.toBe(r0!.losses[0]);
  }, 420_000);

  it('saveCheckpoint + loadCheckpoint round trip is exact and the next step matches', async () => {
    for (const r of ranksOk(await scenario('ckpt'), nproc)) {
      expect(r.differedBefore).toBe(true);
      expect(r.sizes).toEqual({ params: count(), exp_avg: count(), exp_avg_sq: count() });
      expect(r.exact, `rank ${r.rank}`).toEqual({ params: true, exp_avg: true, exp_avg_sq: true });
      expect(r.steps).toEqual([2, 2]);
      expect(r.nextExact, `rank ${r.rank}`).toBe(true);
    }
  }, 420_000);

  it('LoRA: one step equals the single strategy, only the adapters move', async () => {
    const results = ranksOk(await scenario('lora'), nproc);
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
  }, 420_000);
});

describe('megatron limits on qwen3_5', () => {
  it('context parallelism is refused on every rank with the GDN limit and a hint', async () => {
    for (const r of ranksOk(await launchFixture(2, FIXTURE, [dirs.dense, 'limits'], ENV, 120_000))) {
      expect(r.cp2?.name, `rank ${r.rank}`).toBe('ConfigError');
      expect(r.cp2.message).toMatch(
        /^MegatronStrategy\.create\(\): megatron has no context parallelism in this build \(cp=2\); qwen3_5's Gated DeltaNet layers \(linear_attn\) have no context-parallel \(nor tensor-parallel\) split, as in the reference Megatron fallback\. HINT: use cp=1/,
      );
    }
  }, 150_000);
});
