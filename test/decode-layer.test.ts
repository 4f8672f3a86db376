/**
 * K.decodeLayer (one op per dense layer of the engine's decode step) against the nine separate
 * ops the engine's forward ran before it (src/rollout/forward.ts), bit for bit: the layer's two
 * outputs and both KV caches, on both vector paths (AVX2 and portable, switched by the matmul test
 * hook), with cache rows filled beforehand so attention reads earlier positions too. Then its
 * refusals: a bad shape, the reference implementation, a KV position out of the cache.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Device, Tensor, loadNative } from '../src/runtime/device/device-index.js';
import { matmul } from '../src/runtime/device/ops.js';
import * as K from '../src/model/kernels/index.js';
import type { DecodeLayerWeights, RopeTable } from '../src/model/kernels/index.js';
import { expectEachRefused } from './helpers/refused.js';
import { bits, f32On, i32On, seededRand } from './helpers/device-data.js';

const d = Device.get(0);
afterAll(() => loadNative().setMatmulKernel('auto'));

const rand = seededRand(777);
const f32 = f32On(d);
const i32 = i32On(d);
const table = (D: number): RopeTable => ({ invFreq: Float64Array.from({ length: D / 2 }, (_, i) => 10000 ** ((-2 * i) / D)), scale: 1 });

async function same(got: Tensor, want: Tensor, label: string): Promise<void> {
  expect(got.shape, `${label}: shape`).toEqual(want.shape);
  const [g, w] = [await bits(got), await bits(want)];
  const at = g.findIndex((x, i) => x !== w[i]);
  expect(at, `${label}: first differing element`).toBe(-1);
}

interface Shape {
  B: number;
  H: number;
  nH: number;
  nKV: number;
  D: number;
  I: number;
  Smax: number;
  pos: number[];
}

function layer(s: Shape) {
  const { B, H, nH, nKV, D, I, Smax } = s;
  const w: DecodeLayerWeights = {
    qkv: f32(rand((nH + 2 * nKV) * D * H, 0.2), [(nH + 2 * nKV) * D, H]),
    qNorm: f32(rand(D, 2), [D]),
    kNorm: f32(rand(D, 2), [D]),
    o: f32(rand(H * nH * D, 0.2), [H, nH * D]),
    postLn: f32(rand(H, 2), [H]),
    gateUp: f32(rand(2 * I * H, 0.2), [2 * I, H]),
    down: f32(rand(H * I, 0.2), [H, I]),
    nextLn: f32(rand(H, 2), [H]),
  };
  const cacheData = [rand(B * Smax * nKV * D), rand(B * Smax * nKV * D)];
  const cache = () => ({ kCache: f32(cacheData[0]!, [B, Smax, nKV, D]), vCache: f32(cacheData[1]!, [B, Smax, nKV, D]) });
  return { w, cache, x: f32(rand(B * H, 3), [B, H]), h: f32(rand(B * H), [B, H]), positions: i32(s.pos), lengths: i32(s.pos.map((p) => p + 1)) };
}

describe('decodeLayer equals the engine forward’s separate ops, bitwise', () => {
  const shapes: Shape[] = [
    // The quickstart's tiny dense model (4 / 2 heads of 32, H 128, I 384), rows at different lengths.
    { B: 5, H: 128, nH: 4, nKV: 2, D: 32, I: 384, Smax: 16, pos: [0, 7, 3, 15, 1] },
    // Odd sizes: one kv head for six query heads, H and I off the micro-kernel tiles.
    { B: 3, H: 40, nH: 6, nKV: 1, D: 8, I: 20, Smax: 9, pos: [8, 0, 4] },
  ];
  for (const vec of ['auto', 'portable'] as const)
    for (const s of shapes)
      it(`vector path ${vec}, B ${s.B}, H ${s.H}, nH ${s.nH}, nKV ${s.nKV}, D ${s.D}, I ${s.I}`, async () => {
        loadNative().setMatmulKernel(vec);
        const { B, nH, nKV, D } = s;
        const { w, cache, x, h, positions, lengths } = layer(s);
        const tb = table(D);
        const eps = 1e-6;
        const linear = (a: Tensor, wt: Tensor) => matmul(a, wt, { transB: true });
        // The separate ops, as forward.ts runs them.
        const c1 = cache();
        const qkv = linear(h, w.qkv);
        const { q } = K.qkvNormRope(qkv, nH, nKV, w.qNorm, w.kNorm, eps, positions, tb, { cache: { ...c1, positions } });
        const attn = K.attentionDecode(q.reshape([B, 1, nH, D]), c1.kCache, c1.vCache, lengths);
        const r1 = K.addRmsNorm(x, linear(attn.reshape([B, nH * D]), w.o), w.postLn, eps);
        const act = K.swigluFused(linear(r1.y, w.gateUp));
        const r2 = K.addRmsNorm(r1.sum, linear(act, w.down), w.nextLn, eps);
        // The fused op.
        const c2 = cache();
        const got = K.decodeLayer(x, h, w, nH, nKV, eps, positions, lengths, tb, c2);
        await same(got.x, r2.sum, 'x');
        await same(got.h, r2.y, 'h');
        await same(c2.kCache, c1.kCache, 'kCache');
        await same(c2.vCache, c1.vCache, 'vCache');
      });
});

describe('decodeLayer refuses bad input', () => {
  const s: Shape = { B: 2, H: 16, nH: 2, nKV: 1, D: 8, I: 12, Smax: 4, pos: [0, 3] };
  const { w, cache, x, h, positions, lengths } = layer(s);
  const tb = table(8);
  const c = cache();
  const call = (over: Partial<DecodeLayerWeights> = {}, opts?: { impl: 'reference' }, nH = 2) =>
    K.decodeLayer(x, h, { ...w, ...over }, nH, 1, 1e-6, positions, lengths, tb, c, opts);

  it('names the bad argument synchronously', () => {
    expectEachRefused([
      [() => call({ gateUp: f32(rand(10 * 16), [10, 16]) }), /gateUp of shape \[2·I, H\] = \[24, 16\]/],
      [() => call({ o: f32(rand(16 * 8), [16, 8]) }), /o of shape \[H, nH·D\] = \[16, 16\]/],
      [() => call({}, undefined, 3), /query heads \(3\) must be a multiple of kv heads|qkv of shape/],
      [() => call({}, { impl: 'reference' }), /only the fast kernels.*HINT: run the separate ops/],
      [() => K.decodeLayer(x, h, w, 2, 1, 1e-6, lengths, lengths, tb, { kCache: c.kCache, vCache: f32(rand(8), [1, 1, 1, 8]) }), /vCache of shape/],
    ]);
  });

  it('fails the stream on a KV position outside the cache', async () => {
    const s2 = d.newStream();
    try {
      K.decodeLayer(x, h, w, 2, 1, 1e-6, i32([0, 4]), lengths, tb, c, { stream: s2 });
      await expect(s2.synchronize()).rejects.toThrow(/positions\[1\] = 4 does not leave room/);
    } finally {
      s2.destroy();
    }
  });
});
