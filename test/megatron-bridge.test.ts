/**
 * The Megatron <-> HF bridge on the host: every parameter of tiny-dense and tiny-moe
 * survives HF → Megatron → TP shards → gather → HF byte for byte; linear_qkv rows are
 * interleaved by query group exactly as Megatron lays them out, linear_fc1 shards hold
 * their gate rows then their up rows; bad parallel sizes are errors naming the sizes.
 */
import { describe, expect, it } from 'vitest';
import { loadModelConfig, type ModelConfig } from '../src/model/config.js';
import { initialParams } from '../src/model/params.js';
import type { HostParam } from '../src/model/param-store.js';
import { hfToMegatron, megatronSpecs, megatronToHf, tpGather, tpSlice } from '../src/train/megatron/bridge.js';
import { checkParallelSizes, layoutName } from '../src/train/megatron/layout.js';

const cfgOf = (which: 'dense' | 'moe'): ModelConfig => loadModelConfig(new URL(`../examples/models/tiny-${which}/config.json`, import.meta.url).pathname);
const bytes = (p: HostParam) => Buffer.from(p.data.buffer, p.data.byteOffset, p.data.byteLength);

describe.each(['dense', 'moe'] as const)('bridge round trip, tiny-%s', (which) => {
  const cfg = cfgOf(which);
  const hf = initialParams(cfg, 5);

  it.each([1, 2])('HF → Megatron → %i TP shards → gather → HF is exact for every parameter', (tp) => {
    const meg = hfToMegatron(cfg, hf);
    const specs = megatronSpecs(cfg);
    expect([...meg.keys()]).toEqual(specs.map((s) => s.name));
    const gathered = new Map<string, HostParam>();
    for (const spec of specs) {
      const shards = Array.from({ length: tp }, (_, r) => tpSlice(spec, meg.get(spec.name)!, tp, r));
      if (tp > 1 && spec.tp !== 'replicated') expect(bytes(shards[0]!).equals(bytes(shards[1]!))).toBe(false);
      gathered.set(spec.name, tpGather(spec, shards));
    }
    const back = megatronToHf(cfg, gathered);
    expect([...back.keys()]).toEqual([...hf.keys()]);
    for (const [name, p] of hf) {
      expect(back.get(name)!.shape, name).toEqual([...p.shape]);
      expect(bytes(back.get(name)!).equals(bytes(p)), name).toBe(true);
    }
  });

  it('missing or unexpected tensors are errors naming them', () => {
    expect(() => hfToMegatron(cfg, new Map([...hf].filter(([n]) => n !== 'model.norm.weight')))).toThrow(/model\.norm\.weight is missing/);
    expect(() => hfToMegatron(cfg, new Map([...hf, ['model.extra', { shape: [1], data: new Float32Array(1) }]]))).toThrow(
      /unexpected HF tensors \[model\.extra\]/,
    );
  });
});

describe('Megatron layouts', () => {
  const cfg = cfgOf('moe'); // nH 4, nKV 2 (g = 2), D 32, H 128
  const { hiddenSize: H, headDim: D } = cfg;

  it('linear_qkv rows are [q heads of group j, k_j, v_j] per KV group; TP shards are whole groups', () => {
    // Row r of q_proj is filled with 1000 + r, of k_proj with 2000 + r, of v_proj with 3000 + r.
    const hf = initialParams(cfg, 1);
    const fillRows = (name: string, base: number) => {
      const p = hf.get(name)!;
      for (let r = 0; r < p.shape[0]!; r++) p.data.fill(base + r, r * H, (r + 1) * H);
    };
    fillRows('model.layers.0.self_attn.q_proj.weight', 1000);
    fillRows('model.layers.0.self_attn.k_proj.weight', 2000);
    fillRows('model.layers.0.self_attn.v_proj.weight', 3000);
    const qkv = hfToMegatron(cfg, hf).get('decoder.layers.0.self_attention.linear_qkv.weight')!;
    const rowVal = (p: HostParam, r: number) => p.data[r * H]!;
    // Expected, written out: group 0 = q heads 0,1 (q rows 0..2D), k head 0, v head 0; group 1 = q heads 2,3, k 1, v 1.
    const want: number[] = [];
    for (let j = 0; j < 2; j++) {
      for (let r = 0; r < 2 * D; r++) want.push(1000 + j * 2 * D + r);
      for (let r = 0; r < D; r++) want.push(2000 + j * D + r);
      for (let r = 0; r < D; r++) want.push(3000 + j * D + r);
    }
    expect(Array.from({ length: qkv.shape[0]! }, (_, r) => rowVal(qkv, r))).toEqual(want);
    const spec = megatronSpecs(cfg).find((s) => s.name === 'decoder.layers.0.self_attention.linear_qkv.weight')!;
    const shard1 = tpSlice(spec, qkv, 2, 1);
    expect(rowVal(shard1, 0)).toBe(1000 + 2 * D); // TP rank 1 starts with query head 2 (group 1)
    expect(rowVal(shard1, 2 * D)).toBe(2000 + D);
  });

  it('dense linear_fc1 is gate‖up and each TP shard holds its gate rows then its up rows', () => {
    const dense = cfgOf('dense');
    const I = dense.intermediateSize;
    const hf = initialParams(dense, 1);
    const gate = hf.get('model.layers.1.mlp.gate_proj.weight')!,
      up = hf.get('model.layers.1.mlp.up_proj.weight')!;
    for (let r = 0; r < I; r++) {
      gate.data.fill(r, r * dense.hiddenSize, (r + 1) * dense.hiddenSize);
      up.data.fill(-1 - r, r * dense.hiddenSize, (r + 1) * dense.hiddenSize);
    }
    const name = 'decoder.layers.1.mlp.linear_fc1.weight';
    const fc1 = hfToMegatron(dense, hf).get(name)!;
    const rows = (p: HostParam) => Array.from({ length: p.shape[0]! }, (_, r) => p.data[r * dense.hiddenSize]!);
    expect(rows(fc1)).toEqual([...Array.from({ length: I }, (_, r) => r), ...Array.from({ length: I }, (_, r) => -1 - r)]);
    const spec = megatronSpecs(dense).find((s) => s.name === name)!;
    const half = I / 2;
    expect(rows(tpSlice(spec, fc1, 2, 1))).toEqual([
      ...Array.from({ length: half }, (_, r) => half + r),
      ...Array.from({ length: half }, (_, r) => -1 - half - r),
    ]);
  });

  it('experts: local_experts.e.linear_fc1 is expert e of gate_up_proj, linear_fc2 of down_proj', () => {
    const hf = initialParams(cfg, 2);
    const meg = hfToMegatron(cfg, hf);
    const gu = hf.get('model.layers.1.mlp.experts.gate_up_proj')!;
    const fc1 = meg.get('decoder.layers.1.mlp.experts.local_experts.5.linear_fc1.weight')!;
    const n = fc1.data.length;
    expect(Buffer.from(gu.data.buffer, gu.data.byteOffset + 5 * n * 4, n * 4).equals(bytes(fc1))).toBe(true);
  });
});

describe('parallel sizes', () => {
  const moe = cfgOf('moe');
  const dense = cfgOf('dense');
  it('names the size at fault and what to use', () => {
    expect(() => checkParallelSizes(dense, 4, { tp: 2, dp: 1 })).toThrow(/world size 4 != tp \(2\) x dp \(1\) = 2.*--nproc 2.*dp = 2/);
    expect(() => checkParallelSizes(dense, 3, { tp: 3 })).toThrow(/tp=3 does not divide num_attention_heads=4.*tp in \[1, 2\]/);
    expect(() => checkParallelSizes({ ...dense, numHeads: 8, numKvHeads: 2 }, 4, { tp: 4 })).toThrow(/tp=4 does not divide num_key_value_heads=2/);
    expect(() => checkParallelSizes({ ...dense, numHeads: 8, numKvHeads: 4, intermediateSize: 382 }, 4, { tp: 4 })).toThrow(
      /tp=4 does not divide intermediate_size=382.*tp in \[1, 2\]/,
    );
    expect(() => checkParallelSizes(moe, 6, { tp: 1, ep: 3 })).toThrow(/ep=3 does not divide num_experts=8.*ep in \[1, 2\]/);
    expect(() => checkParallelSizes(moe, 2, { ep: 4 })).toThrow(/ep=4 does not divide dp=2/);
    expect(() => checkParallelSizes(dense, 2, { ep: 2 })).toThrow(/needs a MoE model/);
    expect(() => checkParallelSizes(dense, 2, { tp: 0 })).toThrow(/positive integer for tp/);
  });
  it('layout names', () => {
    expect(layoutName(checkParallelSizes(moe, 4, { tp: 2 }))).toBe('tp2dp2');
    expect(layoutName(checkParallelSizes(moe, 2, { ep: 2 }))).toBe('ep2');
    expect(layoutName(checkParallelSizes(moe, 4, { ep: 2 }))).toBe('dp4ep2');
    expect(layoutName(checkParallelSizes(dense, 4, {}))).toBe('dp4');
    expect(layoutName(checkParallelSizes(dense, 2, { tp: 2 }))).toBe('tp2');
  });
});
