// The weight-slot contract (src/rollout/weight-slots.ts): over the ranks of an engine TP
// group the slots cover every HF element exactly `replicas` times (once for a true shard),
// every rank's slots fill each of its runtime parameters exactly once, the transforms are
// the engine's real layouts, descriptors survive JSON, and the engine publishes its own.
import { describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { InvalidArgumentError } from '../src/runtime/errors.js';
import { loadModelConfig, parseModelConfig, type ModelConfig } from '../src/model/config.js';
import { runtimeParamSpecs } from '../src/rollout/runtime-params.js';
import { tpShard } from '../src/rollout/tp-shard.js';
import { RolloutEngine } from '../src/rollout/engine.js';
import { checkSlot, groupSlots, slotNumel, slotTensors, type SlotDescriptor } from '../src/rollout/weight-slots.js';
import { MOE_TEXT, TEXT } from './helpers/qwen35-configs.js';

const tiny = (which: string) => loadModelConfig(new URL(`../examples/models/tiny-${which}/config.json`, import.meta.url).pathname);
const CONFIGS: Record<string, () => ModelConfig> = {
  dense: () => tiny('dense'),
  moe: () => tiny('moe'),
  qwen3_5: () => parseModelConfig(TEXT),
  qwen3_5_moe: () => parseModelConfig(MOE_TEXT),
  // The shared tiny configs have 2 GDN key heads; tp 4 needs 4.
  qwen3_5_k4: () => parseModelConfig({ ...TEXT, linear_num_key_heads: 4 }),
  qwen3_5_moe_k4: () => parseModelConfig({ ...MOE_TEXT, linear_num_key_heads: 4 }),
};
const cfgOf = (which: string) => CONFIGS[which]!();
const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

/** The flat HF indices of a slot's region, in the order the slot writes them. */
function regionIndices(s: SlotDescriptor): number[] {
  const { view, dim, start, len } = s.region;
  const outer = numel(view.slice(0, dim)),
    inner = numel(view.slice(dim + 1));
  const out: number[] = [];
  for (let o = 0; o < outer; o++) for (let r = start; r < start + len; r++) for (let i = 0; i < inner; i++) out.push((o * view[dim]! + r) * inner + i);
  return out;
}

const CASES = [
  ...(['dense', 'moe'] as const).flatMap((which) => [1, 2, 4].map((tp) => [which, tp] as const)),
  ...(['qwen3_5', 'qwen3_5_moe'] as const).flatMap((which) => [1, 2].map((tp) => [which, tp] as const)),
  ['qwen3_5_k4', 4] as const,
  ['qwen3_5_moe_k4', 4] as const,
];

describe('weight slots', () => {
  it.each(CASES)('%s, engine tp %i: the ranks cover every HF element exactly `replicas` times', (which, tp) => {
    const cfg = cfgOf(which);
    const ranks = groupSlots(cfg, tp);
    const counts = new Map<string, Uint8Array>(),
      reps = new Map<string, Uint8Array>();
    for (const slots of ranks) {
      for (const s of slots) {
        let c = counts.get(s.hf),
          r = reps.get(s.hf);
        if (!c) counts.set(s.hf, (c = new Uint8Array(numel(s.shape))));
        if (!r) reps.set(s.hf, (r = new Uint8Array(numel(s.shape))));
        for (const g of regionIndices(s)) {
          c[g]!++;
          if (r[g] && r[g] !== s.replicas) throw new Error(`${s.hf}[${g}]: slots disagree on replicas (${r[g]} vs ${s.replicas})`);
          r[g] = s.replicas;
        }
      }
    }
    expect([...counts.keys()].sort()).toEqual([...slotTensors(cfg)].sort());
    for (const [hf, c] of counts) {
      const r = reps.get(hf)!;
      const bad = c.findIndex((n, g) => n === 0 || n !== r[g]);
      expect(bad, `${hf}: element ${bad} covered ${c[bad]} times, replicas ${r[bad]}`).toBe(-1);
    }
    // A true shard is one rank's; a replicated region every rank's (or a kv group's).
    for (const s of ranks.flat()) expect(s.replicas === 1 || s.replicas === tp || s.transform === 'qkv-pack').toBe(true);
  });

  it.each(CASES)('%s, engine tp %i: each rank fills each runtime parameter exactly once', (which, tp) => {
    const cfg = cfgOf(which);
    groupSlots(cfg, tp).forEach((slots, k) => {
      for (const spec of runtimeParamSpecs(cfg, tpShard(cfg, tp, k))) {
        const hits = new Uint8Array(numel(spec.preShape));
        const mine = slots.filter((s) => s.param === spec.name);
        expect(mine.length, spec.name).toBeGreaterThan(0);
        for (const s of mine) for (let i = 0; i < slotNumel(s); i++) hits[s.dstOffset + i]!++;
        expect(
          hits.every((h) => h === 1),
          `${spec.name} on rank ${k}`,
        ).toBe(true);
        // Every part key the loader needs is filled by some slot.
        expect(new Set(mine.flatMap((s) => s.parts))).toEqual(new Set(spec.parts));
        const t = mine[0]!.transform;
        if (spec.swapOnProcess) expect(mine.map((s) => [s.transform, s.layout])).toEqual([['expert-swap', 'preprocessed']]);
        else expect(t === 'expert-swap' || mine.some((s) => s.layout !== 'processed')).toBe(false);
        if (spec.name.endsWith('qkv_proj.weight')) expect(mine.map((s) => s.transform)).toEqual(['qkv-pack', 'qkv-pack', 'qkv-pack']);
        if (spec.name.endsWith('gate_up_proj.weight')) expect(mine.map((s) => s.transform)).toEqual(['gate-up-pack', 'gate-up-pack']);
      }
    });
  });

  it.each(['qwen3_5', 'qwen3_5_moe'])('%s: GDN tensors are identity slots of their own names; the gated q_proj and the shared expert pack', (which) => {
    const cfg = cfgOf(which);
    const slots = groupSlots(cfg, 1)[0]!;
    const gdn = slots.filter((s) => s.hf.includes('.linear_attn.'));
    expect(gdn.length).toBe(9 * cfg.qwen35!.layerTypes.filter((t) => t === 'linear_attention').length);
    for (const s of gdn) expect([s.param, s.transform, s.dstOffset, s.region.len]).toEqual([s.hf, 'identity', 0, s.shape[0]]);
    const full = cfg.qwen35!.layerTypes.indexOf('full_attention');
    const q = slots.find((s) => s.hf === `model.layers.${full}.self_attn.q_proj.weight`)!;
    const qRows = 2 * cfg.numHeads * cfg.headDim; // per head [query ‖ output gate]
    expect([q.param, q.transform, q.shape, q.dstOffset]).toEqual([`model.layers.${full}.self_attn.qkv_proj.weight`, 'qkv-pack', [qRows, cfg.hiddenSize], 0]);
    const k = slots.find((s) => s.hf === `model.layers.${full}.self_attn.k_proj.weight`)!;
    expect(k.dstOffset).toBe(qRows * cfg.hiddenSize);
    if (cfg.moe) {
      const up = slots.find((s) => s.hf === 'model.layers.0.mlp.shared_expert.up_proj.weight')!;
      expect([up.param, up.transform, up.dstOffset]).toEqual([
        'model.layers.0.mlp.shared_expert.gate_up_proj.weight',
        'gate-up-pack',
        cfg.moe.sharedExpertIntermediateSize! * cfg.hiddenSize,
      ]);
    }
  });

  it.each([
    ['qwen3_5', 2],
    ['qwen3_5_moe_k4', 4],
  ] as const)(
    '%s, engine tp %i: a GDN layer splits by heads (q, k, v channel slices; z / b / a, dt_bias, A_log; out_proj columns; norm whole)',
    (which, tp) => {
      const cfg = cfgOf(which);
      const { numKeyHeads: Hk, numValueHeads: Hv, keyHeadDim: Dk, valueHeadDim: Dv } = cfg.qwen35!.linear;
      const hk = Hk / tp,
        hv = Hv / tp,
        H = cfg.hiddenSize;
      groupSlots(cfg, tp).forEach((slots, r) => {
        const of = (leaf: string) => slots.filter((s) => s.hf === `model.layers.0.linear_attn.${leaf}`);
        const rows = (leaf: string) => of(leaf).map((s) => [s.transform, s.parts, s.region.dim, s.region.start, s.region.len, s.dstOffset, s.replicas]);
        const qkv = [
          [['q'], r * hk * Dk, hk * Dk, 0],
          [['k'], Hk * Dk + r * hk * Dk, hk * Dk, hk * Dk],
          [['v'], 2 * Hk * Dk + r * hv * Dv, hv * Dv, 2 * hk * Dk],
        ] as const;
        const K = cfg.qwen35!.linear.convKernelDim;
        expect(rows('in_proj_qkv.weight')).toEqual(qkv.map(([p, st, n, at]) => ['qkv-pack', p, 0, st, n, at * H, 1]));
        expect(rows('conv1d.weight')).toEqual(qkv.map(([p, st, n, at]) => ['qkv-pack', p, 0, st, n, at * K, 1]));
        expect(rows('in_proj_z.weight')).toEqual([['identity', ['all'], 0, r * hv * Dv, hv * Dv, 0, 1]]);
        for (const leaf of ['in_proj_b.weight', 'in_proj_a.weight', 'dt_bias', 'A_log'])
          expect(rows(leaf)).toEqual([['identity', ['all'], 0, r * hv, hv, 0, 1]]);
        expect(rows('norm.weight')).toEqual([['identity', ['all'], 0, 0, Dv, 0, tp]]);
        expect(rows('out_proj.weight')).toEqual([['identity', ['all'], 1, r * hv * Dv, hv * Dv, 0, 1]]);
      });
    },
  );

  it('descriptors survive JSON, and a broken one is refused with a hint', () => {
    const slots = groupSlots(cfgOf('moe'), 2).flat();
    const back = JSON.parse(JSON.stringify(slots)) as unknown[];
    expect(back.map((x, i) => checkSlot(x, `slot ${i}`))).toEqual(slots);
    const bad = { ...slots[3]!, region: { ...slots[3]!.region, len: 1e9 } };
    let err: unknown = null;
    try {
      checkSlot(JSON.parse(JSON.stringify(bad)), 'engine rank 1');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toMatch(/engine rank 1: .* is not a slot descriptor\. HINT:/);
  });

  it('an engine publishes its own slots with its parameters’ layout states', () => {
    const cfg = cfgOf('dense');
    const engine = RolloutEngine.create(cfg, { device: Device.get(0) });
    try {
      const mine = engine.weightSlots();
      expect(mine.map((s) => ({ ...s, state: 'dropped' }))).toEqual(groupSlots(cfg, 1)[0]);
      expect(new Set(mine.map((s) => s.state))).toEqual(new Set(['dropped']));
      const session = engine.beginDirect();
      const p = engine.params.get('model.norm.weight');
      session.write(p.name, { shape: p.spec.procShape, data: new Float32Array(numel(p.spec.procShape)) });
      session.finish();
      expect(engine.weightSlots().find((s) => s.param === p.name)!.state).toBe('processed');
    } finally {
      engine.release();
    }
  });
});
