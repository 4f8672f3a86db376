/**
 * Colocated weight sync single strategy → rollout engine (tp 1, in process) for Qwen3.5 and
 * Qwen3.5-MoE, through the same planner as Qwen3 (no per-model code: the engine's weight
 * slots say where every HF tensor goes). A full sync after a training step is verified
 * (fingerprints of every HF tensor + log-prob parity with the trainer) and equals, byte for
 * byte, an engine fully reloaded from gatherState('params'), with no post-load processing.
 * A LoRA adapter sync (adapters on the GDN projections, gated q_proj, o_proj / v_proj, the MLP
 * or shared expert, fused experts) rewrites exactly the runtime parameters holding adapted
 * weights, is verified the same way, and gives the log-probs of a merged full sync.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { paramSpecs } from '../src/model/params.js';
import type { LoraConfigInput } from '../src/model/index.js';
import { RolloutEngine } from '../src/rollout/index.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import { ColocateSync } from '../src/sync/index.js';
import { shiftedBatch } from './helpers/fd-loss.js';
import { QWEN35, qwen35Prompts, spreadParams } from './helpers/qwen35-engine.js';

const device = Device.get(0);
const hp = { lr: 2e-2, eps: 1e-8, weightDecay: 0 };
const GDN = ['in_proj_qkv', 'in_proj_z', 'in_proj_b', 'in_proj_a', 'out_proj'];
const LORA: Record<'dense' | 'moe', LoraConfigInput> = {
  dense: { rank: 4, alpha: 8, targetModules: [...GDN, 'q', 'o', 'gate', 'up', 'down'], seed: 5 },
  moe: {
    rank: 4,
    alpha: 8,
    targetModules: [...GDN, 'q', 'v', 'shared_gate', 'shared_up', 'shared_down'],
    targetParameters: ['mlp.experts.gate_up_proj', 'mlp.experts.down_proj'],
    seed: 5,
  },
};
const released: Array<{ release(): void }> = [];
afterAll(() => released.forEach((x) => x.release()));

async function checksums(e: RolloutEngine): Promise<Map<string, string>> {
  return new Map([...(await e.checksums())].map(([n, c]) => [n, `${c.layout}:${c.checksum}`]));
}

/** An engine whose reload sessions are counted (post-load processing runs only in a reload's finish()). */
function countedEngine(cfg: (typeof QWEN35)['dense']): { engine: RolloutEngine; reloads: () => number } {
  const engine = RolloutEngine.create(cfg, { device, maxSeqLen: 48 });
  released.push(engine);
  let n = 0;
  const begin = engine.beginReload.bind(engine);
  engine.beginReload = () => {
    n++;
    return begin();
  };
  return { engine, reloads: () => n };
}

async function maxDiff(a: RolloutEngine, b: RolloutEngine, ids: number[][]): Promise<number> {
  const [x, y] = [await a.computeLogprobs(ids, { temperature: 0.9 }), await b.computeLogprobs(ids, { temperature: 0.9 })];
  let d = 0;
  x.forEach((r, i) => r.forEach((v, t) => (d = Math.max(d, Math.abs(v - y[i]![t]!)))));
  return d;
}

describe.each(['dense', 'moe'] as const)('colocated sync, qwen3.5 %s → engine tp 1', (which) => {
  const cfg = QWEN35[which];
  const probe = qwen35Prompts([10, 6, 8], cfg.vocabSize, 21);
  const verify = { probe: { ids: probe, temperature: 0.9 }, tolerance: 1e-4 };

  it('full sync: verified, byte-equal to a full reload from the trainer, no post-load processing', async () => {
    const s = SingleDeviceStrategy.create(cfg, device, spreadParams(cfg, 7));
    released.push(s);
    s.zeroGrad();
    await s.forwardBackward(shiftedBatch(3, 4, 12, cfg.vocabSize));
    s.optimizerStep(hp);
    const { engine, reloads } = countedEngine(cfg);
    const rep = await new ColocateSync({ strategy: s, engine }).sync({ verify });
    expect(rep.kind).toBe('full');
    expect(reloads()).toBe(0);
    expect(rep.verified!.checksums).toBe(true);
    expect(rep.verified!.fingerprints).toBe(paramSpecs(cfg).length);
    expect(rep.verified!.maxLogprobDiff).toBeLessThan(1e-4);

    const ref = RolloutEngine.create(cfg, { device, maxSeqLen: 48 });
    released.push(ref);
    const reload = ref.beginReload();
    reload.load(await s.gatherState('params'));
    reload.finish();
    const [got, want] = [await checksums(engine), await checksums(ref)];
    expect(got.size).toBe(ref.params.params.size);
    expect(got).toEqual(want);
    expect(await maxDiff(engine, ref, probe)).toBeLessThan(1e-6);
  }, 60_000);

  it('LoRA adapter sync: only adapted runtime params change, verified, equals a merged full sync', async () => {
    const s = SingleDeviceStrategy.create(cfg, device, spreadParams(cfg, 9), { lora: { config: LORA[which] } });
    released.push(s);
    const { engine, reloads } = countedEngine(cfg);
    const sync = new ColocateSync({ strategy: s, engine });
    await sync.sync({ verify });
    for (let i = 0; i < 2; i++) {
      s.zeroGrad();
      await s.forwardBackward(shiftedBatch(5 + i, 4, 12, cfg.vocabSize));
      s.optimizerStep(hp);
    }
    const before = await checksums(engine);
    const rep = await sync.sync({ adapterOnly: true, verify });
    expect(rep.kind).toBe('adapter');
    expect(rep.tensors).toBe(s.lora!.adapters.names.length);
    expect(rep.verified!.checksums).toBe(true);
    expect(rep.verified!.maxLogprobDiff).toBeLessThan(1e-4);
    const after = await checksums(engine);
    const changed = [...after.keys()].filter((n) => after.get(n) !== before.get(n)).sort();
    const bases = new Set(s.lora!.adapters.targets.map((t) => t.base));
    const adapted = [...new Set(engine.weightSlots().flatMap((x) => (bases.has(x.hf) ? [x.param] : [])))].sort();
    expect(changed).toEqual(adapted);
    expect(changed).toContain('model.layers.0.linear_attn.in_proj_qkv.weight');
    expect(changed).toContain(`model.layers.3.self_attn.qkv_proj.weight`);
    expect(reloads()).toBe(0);

    const ref = RolloutEngine.create(cfg, { device, maxSeqLen: 48 });
    released.push(ref);
    s.lora!.adapters.merge((n) => s.store.get(n).value, device.defaultStream);
    await new ColocateSync({ strategy: s, engine: ref }).sync();
    s.lora!.adapters.unmerge((n) => s.store.get(n).value, device.defaultStream);
    expect(await maxDiff(engine, ref, probe)).toBeLessThan(1e-4);
  }, 60_000);
});
