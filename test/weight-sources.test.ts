// The weight-source contract (src/parallel/weight-sources.ts): descriptors survive JSON,
// every strategy layout's owned sources cover every HF tensor exactly once (through the
// one mapping, hfViews), and the device mapping (assembleHf) re-cuts Megatron TP shards
// into the HF tensors the host bridge produces.
import { describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { Tensor } from '../src/runtime/device/device-index.js';
import { InvalidArgumentError } from '../src/runtime/errors.js';
import { loadModelConfig, parseModelConfig, type ModelConfig } from '../src/model/config.js';
import { initialParams, paramSpecs } from '../src/model/params.js';
import { checkDescriptor, describeSource, hfViews, numelOf, type SourceDescriptor } from '../src/parallel/weight-sources.js';
import { assembleHf, scratchNumel } from '../src/parallel/weight-mapping.js';
import { planLayout } from '../src/train/fsdp2/layout.js';
import { fsdp2SourceDescriptors } from '../src/train/fsdp2/weight-sources.js';
import { megatronSourceDescriptors } from '../src/train/megatron/weight-sources.js';
import { hfToMegatron, megatronSpecs, tpSlice } from '../src/train/megatron/bridge.js';
import { MOE_TEXT, TEXT } from './helpers/qwen35-configs.js';

const QWEN35: Record<string, object> = { qwen3_5: TEXT, qwen3_5_moe: MOE_TEXT };
const cfgOf = (which: string) =>
  QWEN35[which] ? parseModelConfig(QWEN35[which]) : loadModelConfig(new URL(`../examples/models/tiny-${which}/config.json`, import.meta.url).pathname);

/** Every rank's descriptors of a layout. */
function fsdp2Ranks(cfg: ModelConfig, dp: number): SourceDescriptor[][] {
  const plan = planLayout(cfg, dp);
  return Array.from({ length: dp }, (_, r) => fsdp2SourceDescriptors(plan, r).map(describeSource));
}
function megatronRanks(cfg: ModelConfig, tp: number, dp: number, ep: number): SourceDescriptor[][] {
  const out: SourceDescriptor[][] = [];
  for (let d = 0; d < dp; d++) for (let t = 0; t < tp; t++) out.push(megatronSourceDescriptors(cfg, { tp, dp, ep }, [d, t]).map(describeSource));
  return out;
}

/** How many times the owners' HF views cover each element of each HF tensor. */
function coverage(ranks: SourceDescriptor[][]): Map<string, Uint8Array> {
  const counts = new Map<string, Uint8Array>();
  for (const sources of ranks) {
    for (const s of sources) {
      if (!s.owner) continue;
      for (const { hf, shape, view } of hfViews(s)) {
        let c = counts.get(hf);
        if (!c) counts.set(hf, (c = new Uint8Array(numelOf(shape))));
        const [a, b] = view.shape.length === 2 ? view.shape : [1, view.shape[0]!];
        const stride = view.shape.length === 2 ? view.global[0]! : 0;
        for (let i = 0; i < a!; i++) for (let j = 0; j < b!; j++) c[view.globalOffset + i * stride + j * view.global[view.global.length - 1]!]!++;
      }
    }
  }
  return counts;
}

const LAYOUTS: Array<[string, string, () => SourceDescriptor[][]]> = [
  ['fsdp2 dp4', 'moe', () => fsdp2Ranks(cfgOf('moe'), 4)],
  ['fsdp2 dp3 (padded chunks)', 'dense', () => fsdp2Ranks(cfgOf('dense'), 3)],
  // GDN tensors (conv1d [C, 1, K], A_log / dt_bias [Hv]) and, on 3 ranks, the shared-expert gate [1, H] in one chunk (two empty).
  ['fsdp2 dp2 qwen3_5', 'qwen3_5', () => fsdp2Ranks(cfgOf('qwen3_5'), 2)],
  ['fsdp2 dp3 qwen3_5_moe (empty chunks)', 'qwen3_5_moe', () => fsdp2Ranks(cfgOf('qwen3_5_moe'), 3)],
  ['megatron tp2 dp2 ep2', 'moe', () => megatronRanks(cfgOf('moe'), 2, 2, 2)],
  ['megatron tp1 dp4 ep2', 'moe', () => megatronRanks(cfgOf('moe'), 1, 4, 2)],
  ['megatron tp2 dp2', 'dense', () => megatronRanks(cfgOf('dense'), 2, 2, 1)],
];

describe('weight sources', () => {
  it.each(LAYOUTS)('%s: the owners cover every HF tensor exactly once', (_name, which, ranks) => {
    const cfg = cfgOf(which);
    const counts = coverage(ranks());
    const want = paramSpecs(cfg, { expertLayout: 'fused' });
    expect([...counts.keys()].sort()).toEqual(want.map((s) => s.name).sort());
    for (const s of want) {
      const c = counts.get(s.name)!;
      expect(c.length, s.name).toBe(numelOf(s.shape));
      const bad = c.findIndex((x) => x !== 1);
      expect(bad === -1 ? 'ok' : `${s.name}[${bad}] covered ${c[bad]} times`).toBe('ok');
    }
  });

  it('descriptors round-trip through JSON (and the mapping reads them the same)', () => {
    for (const [, , ranks] of LAYOUTS) {
      const mine = ranks()[1]!;
      const back = (JSON.parse(JSON.stringify(mine)) as unknown[]).map((x) => checkDescriptor(x, 'rank 1'));
      expect(back).toEqual(mine);
      back.forEach((d, i) => expect(hfViews(d)).toEqual(hfViews(mine[i]!)));
    }
  });

  it('a malformed descriptor is refused with a hint', () => {
    const good = megatronRanks(cfgOf('dense'), 2, 1, 1)[0]![1]!;
    for (const bad of [{ key: 'x' }, { ...good, part: 2 }, { ...good, map: { kind: 'rotate' } }, null]) {
      expect(() => checkDescriptor(bad, 'trainer rank 3')).toThrow(InvalidArgumentError);
      expect(() => checkDescriptor(bad, 'trainer rank 3')).toThrow(/trainer rank 3.*HINT/);
    }
  });

  it('assembleHf re-cuts gathered Megatron TP shards into the HF tensors', async () => {
    const cfg = cfgOf('dense');
    const tp = 2;
    const hf = initialParams(cfg, 7);
    const meg = hfToMegatron(cfg, hf);
    const device = Device.get(0);
    const stream = device.defaultStream;
    const specs = megatronSpecs(cfg);
    const sources = megatronSourceDescriptors(cfg, { tp, dp: 1, ep: 1 }, [0, 0]).filter((s) => s.parts === tp);
    expect(new Set(sources.map((s) => s.map.kind))).toEqual(new Set(['qkv', 'gate-up', 'identity']));
    for (const s of sources) {
      const spec = specs.find((x) => x.name === s.key)!;
      const shards = Array.from({ length: tp }, (_, t) => tpSlice(spec, meg.get(s.key)!, tp, t).data);
      const parts = Tensor.fromArray(device, Float32Array.from(shards.flatMap((x) => [...x])), [tp * s.localNumel], { stream });
      const scratch = Tensor.empty(device, [Math.max(1, scratchNumel(s))], 'fp32');
      try {
        const got = assembleHf(s, parts, scratch, stream);
        expect(got.map(([n]) => n).sort()).toEqual(
          hfViews(s, 0)
            .map((v) => v.hf)
            .sort(),
        );
        for (const [name, t] of got) {
          const want = hf.get(name)!;
          expect(t.shape, name).toEqual(want.shape);
          const data = (await t.toArray({ stream, timeoutMs: 60_000 })) as Float32Array;
          expect(
            data.every((x, i) => Object.is(x, want.data[i])),
            name,
          ).toBe(true);
        }
      } finally {
        parts.release();
        scratch.release();
      }
    }
  });
});
