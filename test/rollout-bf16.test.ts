/**
 * The rollout engine with bf16 weights (`dtype: 'bfloat16'`, weight-dtype.ts) against the
 * fp32 engine on the tiny dense and MoE models: which parameters are bf16, that their bytes
 * are the round-to-nearest-even cast of the checkpoint whatever it is loaded from (fp32 or
 * BF16 host tensors, fp32 device tensors, a direct write), logits within bf16 tolerance,
 * greedy tokens that agree, a LoRA adapter sync on bf16 weights, and a clear error for a bad dtype.
 *
 * Tolerance: bf16 keeps 8 significant bits, so each matmul input (the weight and the
 * activation cast for it) is off by at most u = 2^-9 relative, each product by 2u. The
 * logits of the 2-layer tiny models pass ~5 chained matmuls (qkv, o, gate_up, down, head)
 * per layer path, so their error is a few u of the logit scale: measured 0.0034-0.0046
 * (dense) and 0.0068-0.011 (MoE, whose router sees the rounded hidden state) of the
 * largest logit over seeds 7-9. The bound is 0.02 (~10u) of the largest logit; a wrong
 * slice, a missing cast or an fp32 value read as bf16 is off by O(1).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { Tensor } from '../src/runtime/device/tensor.js';
import { InvalidArgumentError } from '../src/runtime/errors.js';
import { initialParams } from '../src/model/params.js';
import type { HostParam } from '../src/model/param-store.js';
import { RolloutEngine, applyEngineAdapters, hfDirectWrites, hfLoadPlan, releaseEngineLora, tpShard, type EngineDtype } from '../src/rollout/index.js';
import { cast } from '../src/runtime/device/ops.js';
import { cfgOf, expectedRuntime, maxRelErr, prompts } from './helpers/rollout-reference.js';
import { bf16Bytes, checksumsAs, roundedToBf16 } from './helpers/bf16.js';

const SEED = 7;
const TOL = 0.02;
const device = Device.get(0);

function caught(fn: () => unknown): any {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new Error('expected a throw');
}

const checksums = async (e: RolloutEngine) => Object.fromEntries([...(await e.checksums())].map(([n, c]) => [n, c.checksum]));

describe.each(['dense', 'moe'] as const)('rollout engine with bf16 weights, tiny %s', (which) => {
  const cfg = cfgOf(which);
  const host = initialParams(cfg, SEED);
  const engines: RolloutEngine[] = [];
  const make = (dtype: EngineDtype, weights: Iterable<readonly [string, any]> = host) => {
    const e = RolloutEngine.create(cfg, { device, dtype });
    engines.push(e);
    const r = e.beginReload();
    r.load(weights);
    r.finish();
    return e;
  };
  let fp32: RolloutEngine, bf16: RolloutEngine;
  beforeAll(() => {
    fp32 = make('float32');
    bf16 = make('bfloat16');
  });
  afterAll(() => {
    for (const e of engines) e.release();
  });

  it('holds the matmul weights in bf16 (the norms, the router and the rest fp32) at the host RNE cast of the checkpoint', async () => {
    const dt = (n: string) => bf16.params.get(n).tensor!.dtype;
    expect(dt('model.embed_tokens.weight')).toBe('bf16');
    expect(dt('model.layers.0.self_attn.qkv_proj.weight')).toBe('bf16');
    expect(dt('model.layers.1.self_attn.o_proj.weight')).toBe('bf16');
    expect(dt('model.layers.0.input_layernorm.weight')).toBe('fp32');
    expect(dt('model.layers.0.self_attn.q_norm.weight')).toBe('fp32');
    expect(dt('model.norm.weight')).toBe('fp32');
    if (which === 'moe') {
      expect(dt('model.layers.0.mlp.experts.w13_weight')).toBe('bf16');
      expect(dt('model.layers.0.mlp.experts.w2_weight')).toBe('bf16');
      expect(dt('model.layers.0.mlp.gate.weight')).toBe('fp32');
    } else {
      expect(dt('model.layers.0.mlp.gate_up_proj.weight')).toBe('bf16');
      expect(dt('model.layers.0.mlp.down_proj.weight')).toBe('bf16');
    }
    for (const p of fp32.params.params.values()) expect(p.tensor!.dtype).toBe('fp32');
    expect(await checksums(bf16)).toEqual(checksumsAs(expectedRuntime(cfg, host, 1, 0), 'bfloat16'));
    // The weights are nearly all matmul weights: close to half the bytes.
    expect(bf16.params.deviceBytes()).toBeLessThan(0.52 * fp32.params.deviceBytes());
    expect(bf16.params.deviceBytes()).toBeGreaterThan(0.5 * fp32.params.deviceBytes());
  });

  it('fp32 device tensors load to the same bytes; a BF16 checkpoint loads exactly (widened where the engine holds fp32)', async () => {
    const asBf16 = new Map([...host].map(([n, p]) => [n, { dtype: 'BF16' as const, shape: [...p.shape], data: bf16Bytes(p.data) }]));
    const rounded = new Map<string, HostParam>([...host].map(([n, p]) => [n, { shape: p.shape, data: roundedToBf16(p.data) }]));
    // Its bf16 parameters are the same bytes as from fp32; its fp32 ones (norms, router) hold the BF16 values widened.
    expect(await checksums(make('bfloat16', asBf16))).toEqual(checksumsAs(expectedRuntime(cfg, rounded, 1, 0), 'bfloat16'));
    const onDevice = [...host].map(([n, p]) => [n, Tensor.fromArray(device, p.data, [...p.shape])] as const);
    try {
      expect(await checksums(make('bfloat16', onDevice))).toEqual(await checksums(bf16));
    } finally {
      for (const [, t] of onDevice) t.release();
    }
    expect(await checksums(make('float32', asBf16))).toEqual(checksumsAs(expectedRuntime(cfg, rounded, 1, 0), 'float32'));
  });

  it('a direct write of fp32 values stores their bf16 cast; a strided direct write from an fp32 source is refused, naming the cast', async () => {
    const e = make('bfloat16');
    const name = 'model.layers.1.self_attn.o_proj.weight';
    const want = (await checksums(bf16))[name];
    const zero = new Float32Array(e.params.get(name).tensor!.numel);
    const s = e.beginDirect();
    try {
      s.write(name, { shape: e.params.get(name).spec.procShape, data: zero });
      expect((await checksums(e))[name]).not.toBe(want);
      const src = Tensor.fromArray(device, expectedRuntime(cfg, host, 1, 0).get(name)!, e.params.get(name).spec.procShape);
      s.write(name, src);
      src.release();
      expect((await checksums(e))[name]).toBe(want);
      const shard = tpShard(cfg, 1, 0);
      const [dw] = hfDirectWrites(cfg, shard, hfLoadPlan(cfg, shard), name);
      const full = Tensor.fromArray(device, host.get(name)!.data, [...host.get(name)!.shape]);
      const err = caught(() => s.writeInPlace(name, (dst, st) => dw!.write(dst, full, st)));
      full.release();
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect(err.message).toMatch(/expected a bf16 .*received fp32.*HINT: .*cast\(\)/);
    } finally {
      if (s.open) s.abort();
    }
  });

  it(`prefill logits are within ${TOL} of the fp32 engine's largest logit (and not identical: the weights really are bf16)`, async () => {
    const ps = prompts(6, 11);
    const [a, b] = [await fp32.prefillLogits(ps), await bf16.prefillLogits(ps)];
    let worst = 0;
    for (let i = 0; i < ps.length; i++) worst = Math.max(worst, maxRelErr(b[i]!, a[i]!));
    expect(worst).toBeLessThan(TOL);
    expect(worst).toBeGreaterThan(1e-5);
  });

  it('greedy tokens agree with the fp32 engine (dense: 8 tokens of 6 prompts; MoE: the first token wherever the fp32 margin exceeds the tolerance)', async () => {
    const ps = prompts(6, 11);
    const [a, b] = [await fp32.generate(ps, { maxTokens: 8, temperature: 0 }), await bf16.generate(ps, { maxTokens: 8, temperature: 0 })];
    if (which === 'dense') {
      expect(b.tokens).toEqual(a.tokens);
      return;
    }
    const logits = await fp32.prefillLogits(ps);
    const V = cfg.vocabSize;
    let checked = 0;
    ps.forEach((p, i) => {
      const last = Array.from(logits[i]!.subarray((p.length - 1) * V, p.length * V)).sort((x, y) => y - x);
      const scale = Math.max(...Array.from(logits[i]!, Math.abs));
      if (last[0]! - last[1]! > 2 * TOL * scale) {
        checked++;
        expect(b.tokens[i]![0]).toBe(a.tokens[i]![0]);
      }
    });
    expect(checked).toBeGreaterThan(0);
  });

  it('a LoRA adapter sync on bf16 weights forms base + scaling·B·A in fp32 and rounds once (within bf16 rounding of the fp32 engine)', async () => {
    const name = 'model.layers.1.self_attn.o_proj.weight';
    const [e16, e32] = [make('bfloat16'), make('float32')];
    const valuesOf = async (e: RolloutEngine) => {
      const t = e.params.get(name).tensor!;
      const wide = t.dtype === 'fp32' ? t : cast(t, 'fp32', { stream: e.stream });
      try {
        return (await wide.toArray({ stream: e.stream })) as Float32Array;
      } finally {
        if (wide !== t) wide.release();
      }
    };
    const before = await valuesOf(e16);
    const [out, inn] = host.get(name)!.shape as [number, number];
    const rnd = (n: number, k: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37 + k) * 0.05);
    const a = Tensor.fromArray(device, rnd(4 * inn, 1), [4, inn]);
    const b = Tensor.fromArray(device, rnd(out * 4, 2), [out, 4]);
    try {
      expect(applyEngineAdapters(e16, [{ base: name, a, b }], 2)).toEqual([name]);
      applyEngineAdapters(e32, [{ base: name, a, b }], 2);
    } finally {
      a.release();
      b.release();
    }
    const [got, want] = [await valuesOf(e16), await valuesOf(e32)];
    expect(e16.params.get(name).tensor!.dtype).toBe('bf16');
    let moved = 0;
    for (let i = 0; i < want.length; i++) {
      // Two roundings (the base, then the sum), each within 2^-9 relative, plus the base's own rounding carried into the sum.
      expect(Math.abs(got[i]! - want[i]!)).toBeLessThanOrEqual(2 ** -8 * (Math.abs(want[i]!) + Math.abs(before[i]!)) + 1e-30);
      if (got[i] !== before[i]) moved++;
    }
    expect(moved).toBeGreaterThan(want.length / 2); // the adapter took effect
    const ps = prompts(4, 11);
    const [l16, l32] = [await e16.prefillLogits(ps), await e32.prefillLogits(ps)];
    for (let i = 0; i < ps.length; i++) expect(maxRelErr(l16[i]!, l32[i]!)).toBeLessThan(TOL);
    releaseEngineLora(e16);
    releaseEngineLora(e32);
  });

  it('sleep level 1 and wake keep the bf16 bytes', async () => {
    const e = make('bfloat16');
    const before = await checksums(e);
    await e.sleep(1);
    e.wake();
    expect(await checksums(e)).toEqual(before);
  });
});

describe('rollout engine dtype option', () => {
  it.each(['bf16', 'fp16', 'float16', 1, null])('dtype %s is refused with the two accepted values and a hint', (bad) => {
    const err = caught(() => RolloutEngine.create(cfgOf('dense'), { device, dtype: bad as any }));
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err.message).toMatch(/dtype to be 'float32' or 'bfloat16'.*HINT: /);
  });
});
