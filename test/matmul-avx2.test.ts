/**
 * The fp32 matmul on every micro-kernel mode this CPU has below AVX-512 (portable, and avx2 when
 * the CPU has AVX2+FMA: the unpacked path of matmul_avx2.cc for dims under 512) against the
 * reference kernel: every transpose combination, row and column counts around the 6 x 16 tile
 * and the 16-wide masked edge, K = 0 and 1, two k slices (K > 256), B read in place and packed
 * (kc x N past 16 Ki floats), more than one row block (M > 144) and column panel (N > 256).
 * The same inputs give the same bits on a second run.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Device, Tensor, loadNative, matmul } from '../src/runtime/device/device-index.js';

const d = Device.get(0);
afterAll(() => loadNative().setMatmulKernel('auto'));

/** Deterministic pseudo-random values in [-2, 2) (xorshift). */
function randomF32(n: number, seed: number): Float32Array {
  let x = seed >>> 0 || 1;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = (x / 2 ** 32) * 4 - 2;
  }
  return out;
}

type Shape = [m: number, n: number, k: number];

function modes(): Array<'portable' | 'avx2'> {
  const f = loadNative().cpuFeatures();
  return ['portable', ...(f.avx2 && f.fma ? ['avx2' as const] : [])];
}

/** Runs every shape on every transpose combination in `mode`, against the reference kernel. */
async function checkShapes(mode: 'portable' | 'avx2', shapes: Shape[], dtype: 'fp32' | 'bf16' = 'fp32'): Promise<void> {
  const native = loadNative();
  expect(native.setMatmulKernel(mode).fp32).toBe(mode === 'avx2' ? 'avx2-fma' : 'portable');
  let seed = 1;
  for (const [m, n, k] of shapes) {
    for (const [ta, tb] of [
      [false, false],
      [true, false],
      [false, true],
      [true, true],
    ] as const) {
      const a = Tensor.fromArray(d, randomF32(m * k, seed++), ta ? [k, m] : [m, k], { dtype });
      const b = Tensor.fromArray(d, randomF32(k * n, seed++), tb ? [n, k] : [k, n], { dtype });
      const ref = matmul(a, b, { transA: ta, transB: tb, impl: 'reference' });
      const fast = matmul(a, b, { transA: ta, transB: tb, impl: 'fast' });
      const again = matmul(a, b, { transA: ta, transB: tb, impl: 'fast' });
      const want = await ref.toArray();
      const got = await fast.toArray();
      const where = `${mode} ${dtype} m=${m} n=${n} k=${k} transA=${ta} transB=${tb}`;
      expect(got.length, where).toBe(m * n);
      const tol = 1e-5 * Math.sqrt(Math.max(1, k));
      for (let i = 0; i < want.length; i++) {
        if (!(Math.abs(got[i]! - want[i]!) <= tol * Math.max(1, Math.abs(want[i]!)))) {
          throw new Error(`${where}: mismatch at ${i} (row ${Math.floor(i / n)}, col ${i % n}): got ${got[i]} want ${want[i]}`);
        }
      }
      expect(Buffer.from(await again.toBytes()).equals(Buffer.from(await fast.toBytes())), `${where}: second run differs`).toBe(true);
      for (const t of [a, b, ref, fast, again]) t.release();
    }
  }
}

describe('fp32 matmul below AVX-512 (portable, avx2 unpacked path)', () => {
  const edges = [1, 5, 6, 7, 15, 16, 17, 63, 64, 65, 129];

  for (const mode of modes()) {
    it(`${mode}: edge rows and columns x K in {0, 1, 17, 129, 300}, every transpose, match the reference kernel, bitwise repeatable`, async () => {
      const shapes: Shape[] = [];
      for (const m of edges) for (const n of edges) for (const k of [0, 1, 17, 129, 300]) shapes.push([m, n, k]);
      await checkShapes(mode, shapes);
    }, 300_000);

    it(`${mode}: row blocks, column panels, packed and in-place B, and the packed path from 512 on`, async () => {
      // m = 151: two row blocks; n = 300 / 530: two and three column panels (B packed);
      // [64, 128, 128]: B in place (16 Ki floats) beside [64, 129, 128] (packed, masked edge);
      // [512, 512, 64] stays on the unpacked path, [512, 512, 512] takes the packed one.
      await checkShapes(mode, [
        [151, 37, 70],
        [13, 300, 257],
        [9, 530, 33],
        [64, 128, 128],
        [64, 129, 128],
        [200, 768, 64],
        [512, 512, 64],
        [512, 512, 512],
      ]);
    }, 300_000);

    it(`${mode}: bf16 inputs (converted to fp32 on the packed path) still match the reference kernel`, async () => {
      await checkShapes(
        mode,
        [
          [1, 17, 5],
          [65, 63, 129],
          [7, 300, 0],
        ],
        'bf16',
      );
    }, 120_000);
  }
});
