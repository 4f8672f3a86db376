/**
 * The rollout engine's fused kernels (K.qkvNormRope, K.addRmsNorm) against the sequence of
 * separate kernels they replace, bit for bit, for both implementations and both vector paths
 * (AVX2 and portable, switched by the matmul test hook), and the premise of the engine's one
 * qkv matmul: a matmul against a whole weight gives, in each column block, the bits of the
 * matmul against that block's row view (fp32 and bf16, on every micro-kernel and blocking path:
 * dims under and over 512, K over one 256-deep slice).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Device, Tensor, loadNative, type KernelImpl } from '../src/runtime/device/device-index.js';
import { add, cast, matmul } from '../src/runtime/device/ops.js';
import { viewOf } from '../src/runtime/device/views.js';
import { InvalidArgumentError } from '../src/runtime/errors.js';
import * as K from '../src/model/kernels/index.js';
import type { RopeTable } from '../src/model/kernels/index.js';
import { bits, f32On, i32On, seededRand } from './helpers/device-data.js';

const d = Device.get(0);
const IMPLS: KernelImpl[] = ['fast', 'reference'];
const VEC_PATHS = ['auto', 'portable'] as const;
/**
 * The (impl, mode) pairs worth running: the reference kernels are plain scalar loops that never read the
 * matmul / vector-path mode (native ops.cc calls ref:: directly), so they run under one mode; the fast
 * kernels run under every mode given, since each selects other micro-kernels.
 */
const underModes = <M extends string>(modes: readonly M[]): { impl: KernelImpl; mode: M }[] => [
  ...modes.map((mode) => ({ impl: 'fast' as KernelImpl, mode })),
  { impl: 'reference', mode: modes[0]! },
];
afterAll(() => loadNative().setMatmulKernel('auto'));

const rand = seededRand(12345);
const f32 = f32On(d);
const i32 = i32On(d);
const table = (D: number, scale: number): RopeTable => ({
  invFreq: Float64Array.from({ length: D / 2 }, (_, i) => 10000 ** ((-2 * i) / D)),
  scale,
});

/** Bitwise equality, naming the first differing element. */
async function same(got: Tensor, want: Tensor, label: string): Promise<void> {
  expect(got.shape, `${label}: shape`).toEqual(want.shape);
  const [g, w] = [await bits(got), await bits(want)];
  const at = g.findIndex((x, i) => x !== w[i]);
  expect(at, `${label}: first differing element`).toBe(-1);
}

describe('qkvNormRope equals matmul row views → rmsNorm → rope, bitwise', () => {
  // Tiny dense (4 / 2 heads of 32), a MoE-like GQA shape, decode (T = 3, positions far apart: the
  // per-token angle path) and prefill (T = 10, positions 0..4 twice: the per-position table).
  const shapes = [
    { nH: 4, nKV: 2, D: 32, pos: [0, 1, 2, 3, 4, 0, 1, 2, 3, 4], scale: 1 },
    { nH: 6, nKV: 1, D: 16, pos: [17, 3, 90], scale: 1.25 },
    { nH: 2, nKV: 2, D: 8, pos: [5], scale: 1 },
  ];
  for (const { impl, mode: vec } of underModes(VEC_PATHS))
    for (const s of shapes)
      it(`${impl}, vector path ${vec}, nH ${s.nH}, nKV ${s.nKV}, D ${s.D}, T ${s.pos.length}`, async () => {
        loadNative().setMatmulKernel(vec);
        const { nH, nKV, D } = s;
        const T = s.pos.length,
          Hd = 48,
          W = (nH + 2 * nKV) * D;
        const h = f32(rand(T * Hd), [T, Hd]);
        const wqkv = f32(rand(W * Hd, 0.3), [W, Hd]);
        const qw = f32(rand(D, 2), [D]);
        const kw = f32(rand(D, 2), [D]);
        const positions = i32(s.pos);
        const tb = table(D, s.scale);
        const o = { impl };
        const rows = (start: number, n: number) => matmul(h, viewOf(wqkv, [n, Hd], start * Hd), { transB: true, ...o });
        const normRope = (proj: Tensor, heads: number, w: Tensor) => {
          const r = K.rmsNorm(proj.reshape([T * heads, D]), w, 1e-6, o);
          return K.rope(r.y.reshape([T, heads, D]), positions, tb, o);
        };
        const wantQ = normRope(rows(0, nH * D), nH, qw);
        const wantK = normRope(rows(nH * D, nKV * D), nKV, kw);
        const wantV = rows((nH + nKV) * D, nKV * D);
        const qkv = matmul(h, wqkv, { transB: true, ...o });
        const got = K.qkvNormRope(qkv, nH, nKV, qw, kw, 1e-6, positions, tb, o);
        await same(got.q, wantQ, 'q');
        await same(got.k, wantK, 'k');
        await same(got.v.reshape([T, nKV * D]), wantV, 'v');
      });

  for (const impl of IMPLS)
    it(`${impl}: with options.cache it also does kvCacheWrite's write, and a bad cache position fails the op with the cache untouched`, async () => {
      const [B, S, nH, nKV, D, Smax] = [2, 3, 2, 1, 8, 5];
      const T = B * S,
        W = (nH + 2 * nKV) * D;
      const qkv = f32(rand(T * W), [T, W]);
      const qw = f32(rand(D, 2), [D]);
      const kw = f32(rand(D, 2), [D]);
      const positions = i32([0, 1, 2, 0, 1, 2]);
      const tb = table(D, 1);
      const cacheOf = () => ({ k: f32(rand(B * Smax * nKV * D), [B, Smax, nKV, D]), v: f32(rand(B * Smax * nKV * D), [B, Smax, nKV, D]) });
      const want = cacheOf();
      const cachePos = i32([2, 0]);
      const sep = K.qkvNormRope(qkv, nH, nKV, qw, kw, 1e-6, positions, tb, { impl });
      // Same starting contents in both caches: want's are copied into got's through a host round trip.
      const wk = await want.k.toArray(),
        wv = await want.v.toArray();
      const gk = f32(Float32Array.from(wk), [B, Smax, nKV, D]),
        gv = f32(Float32Array.from(wv), [B, Smax, nKV, D]);
      K.kvCacheWrite(want.k, want.v, sep.k.reshape([B, S, nKV, D]), sep.v.reshape([B, S, nKV, D]), cachePos, { impl });
      const fused = K.qkvNormRope(qkv, nH, nKV, qw, kw, 1e-6, positions, tb, { impl, cache: { kCache: gk, vCache: gv, positions: cachePos } });
      await same(fused.k, sep.k, 'k');
      await same(gk, want.k, 'kCache');
      await same(gv, want.v, 'vCache');
      // Row 0 at position 3 leaves room for 2 of its 3 tokens: the op fails when it runs, the cache keeps its bytes.
      const s = d.newStream();
      try {
        const before = await bits(gk);
        K.qkvNormRope(qkv, nH, nKV, qw, kw, 1e-6, positions, tb, { impl, stream: s, cache: { kCache: gk, vCache: gv, positions: i32([3, 0]) } });
        await expect(s.synchronize()).rejects.toThrow(/positions\[0\] = 3 does not leave room for 3 position\(s\) in a cache of 5/);
        expect(Array.from(await bits(gk))).toEqual(Array.from(before));
      } finally {
        s.destroy();
      }
      const small = f32(rand(4 * 2 * 8), [4, 2, 1, 8]);
      const wrongRows = { kCache: small, vCache: small, positions: i32([0, 0, 0, 0]) };
      expect(() => K.qkvNormRope(qkv, nH, nKV, qw, kw, 1e-6, positions, tb, { impl, cache: wrongRows })).toThrow(/T = 6 tokens into a cache of B = 4 rows/);
      expect(() => K.qkvNormRope(qkv, nH, nKV, qw, kw, 1e-6, positions, tb, { impl, cache: { ...wrongRows, vCache: gv } })).toThrow(
        /cache\.vCache of shape \[B, Smax, nKV, D \(as kCache\)\]/,
      );
    });

  it('rejects a qkv row that is not (nH + 2·nKV)·D wide, and an odd head dim', () => {
    const qkv = f32(rand(2 * 7 * 8), [2, 56]);
    const w8 = f32(rand(8), [8]);
    const pos = i32([0, 1]);
    expect(() => K.qkvNormRope(qkv, 4, 2, w8, w8, 1e-6, pos, table(8, 1))).toThrow(/\(nH \+ 2·nKV\)·D = \(4 \+ 2·2\)·8 = 64 but they hold 56/);
    const w7 = f32(rand(7), [7]);
    expect(() => K.qkvNormRope(f32(rand(2 * 28), [2, 28]), 2, 1, w7, w7, 1e-6, pos, table(8, 1))).toThrow(InvalidArgumentError);
    expect(() => K.qkvNormRope(qkv, 5, 1, w8, f32(rand(4), [4]), 1e-6, pos, table(8, 1))).toThrow(/kw of shape \[D\] = \[8\]/);
  });
});

describe('addRmsNorm equals add → rmsNorm, bitwise', () => {
  for (const { impl, mode: vec } of underModes(VEC_PATHS))
    for (const [T, H] of [
      [1, 128],
      [7, 37],
    ] as const)
      it(`${impl}, vector path ${vec}, [${T}, ${H}]`, async () => {
        loadNative().setMatmulKernel(vec);
        const x = f32(rand(T * H, 3), [T, H]);
        const dx = f32(rand(T * H), [T, H]);
        const w = f32(rand(H, 2), [H]);
        const sum = add(x, dx);
        const want = K.rmsNorm(sum, w, 1e-6, { impl });
        const got = K.addRmsNorm(x, dx, w, 1e-6, { impl });
        await same(got.sum, sum, 'sum');
        await same(got.y, want.y, 'y');
      });

  it('rejects mismatched shapes', () => {
    const x = f32(rand(12), [3, 4]);
    expect(() => K.addRmsNorm(x, f32(rand(8), [2, 4]), f32(rand(4), [4]))).toThrow(/d of shape \[shape of x\]/);
    expect(() => K.addRmsNorm(x, x, f32(rand(3), [3]))).toThrow(/w of shape \[H\] = \[4\]/);
  });
});

describe('a matmul against a whole weight equals the matmuls against its row views, bitwise', () => {
  // [M, K] x [N, K]ᵀ split into column blocks of N: the engine's tiny qkv (64 + 64 + 64 + 64 of K 128, M 3),
  // a packed-path shape (every dim >= 512 on the AVX2 kernel) and K over one 256-deep slice.
  const cases = [
    { M: 3, K: 128, blocks: [128, 64, 64] },
    { M: 16, K: 300, blocks: [96, 40, 40] },
    { M: 512, K: 512, blocks: [512, 64, 64] },
  ];
  for (const { impl, mode } of underModes(['auto', 'avx2', 'portable'] as const))
    for (const dtype of ['fp32', 'bf16'] as const)
      for (const c of cases)
        it(`${mode}, ${dtype}, ${impl}, M ${c.M}, K ${c.K}, N ${c.blocks.join(' + ')}`, async () => {
          loadNative().setMatmulKernel(mode);
          const N = c.blocks.reduce((a, b) => a + b, 0);
          const as = (t: Tensor) => (dtype === 'fp32' ? t : cast(t, 'bf16'));
          const x = as(f32(rand(c.M * c.K), [c.M, c.K]));
          const w = as(f32(rand(N * c.K, 0.2), [N, c.K]));
          const whole = await bits(matmul(x, w, { transB: true, impl }));
          let at = 0;
          for (const n of c.blocks) {
            const part = await bits(matmul(x, viewOf(w, [n, c.K], at * c.K), { transB: true, impl }));
            for (let m = 0; m < c.M; m++) {
              const row = whole.subarray(m * N + at, m * N + at + n);
              const want = part.subarray(m * n, (m + 1) * n);
              const j = row.findIndex((v, i) => v !== want[i]);
              expect(j, `row ${m}, columns from ${at}: first differing column`).toBe(-1);
            }
            at += n;
          }
        });
});
