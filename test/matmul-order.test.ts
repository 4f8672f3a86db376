/**
 * The AVX2 fp32 matmul's summation order, bit for bit. Step records, the engine vs trainer
 * log-prob equality and batch invariance all rest on every element of C being computed the same
 * way whatever the kernel's blocking: per k slice of 256, one in-order chain of fused
 * multiply-adds over k starting from +0, and the slices' sums added to C in order (the first
 * stores). The oracle here computes exactly that in JS (an exact fp32 FMA on doubles) and the
 * kernel must match it in every bit, over odd sizes and tails around the 6 x 16 tile, every
 * transpose, B read in place and packed, more than one row block and column panel, A packed (every
 * dim >= 512), a batch, bf16 inputs and bf16 output. A second check proves the shapes are sensitive
 * to the order: the same oracle without the 256 slicing differs from the kernel.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Device, Tensor, loadNative, matmul } from '../src/runtime/device/device-index.js';

const d = Device.get(0);
afterAll(() => loadNative().setMatmulKernel('auto'));

const KC = 256;

const f64 = new Float64Array(1);
const u64 = new BigUint64Array(f64.buffer);

/**
 * fp32 fma(a, b, c) rounded once: a * b is exact in a double (24 + 24 bits), the double sum is
 * made round-to-odd from its exact error (TwoSum), and rounding that to fp32 is then correct
 * (53 >= 24 + 2 bits), with no double rounding.
 */
function fmaf(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  const bb = s - p;
  const err = p - (s - bb) + (c - bb);
  if (err === 0) return Math.fround(s);
  f64[0] = s;
  if ((u64[0]! & 1n) === 0n) u64[0] = s > 0 === err > 0 ? u64[0]! + 1n : u64[0]! - 1n;
  return Math.fround(f64[0]!);
}

/** Deterministic pseudo-random values in [-2, 2) (xorshift), with some exact zeros and -0. */
function randomF32(n: number, seed: number): Float32Array {
  let x = seed >>> 0 || 1;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = x % 97 === 0 ? 0 : x % 101 === 0 ? -0 : (x / 2 ** 32) * 4 - 2;
  }
  return out;
}

/** fp32 -> bf16 bits, round to nearest even (the kernels' F32ToBF16; no NaNs here). */
function bf16Bits(v: number): number {
  const u = new Uint32Array(new Float32Array([v]).buffer)[0]!;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

interface Case {
  m: number;
  n: number;
  k: number;
  batch?: number;
  dtype?: 'fp32' | 'bf16';
  outDtype?: 'fp32' | 'bf16';
  /** Check every `rowStep`-th row (and the last): the large shapes' oracle is slow in JS. */
  rowStep?: number;
}

/**
 * Runs one case on every transpose combination and compares C's bits with the oracle's.
 * Returns how many checked elements the unsliced oracle (one chain over all of k) gets wrong.
 */
async function checkCase(c: Case): Promise<number> {
  const { m, n, k, batch = 1, dtype = 'fp32', outDtype = 'fp32', rowStep = 1 } = c;
  let unslicedDiffers = 0;
  let seed = m * 7919 + n * 104729 + k * 31 + batch;
  for (const [ta, tb] of [
    [false, false],
    [true, false],
    [false, true],
    [true, true],
  ] as const) {
    const shapeA = ta ? [k, m] : [m, k];
    const shapeB = tb ? [n, k] : [k, n];
    const a = Tensor.fromArray(d, randomF32(batch * m * k, seed++), batch > 1 ? [batch, ...shapeA] : shapeA, { dtype });
    const b = Tensor.fromArray(d, randomF32(batch * k * n, seed++), batch > 1 ? [batch, ...shapeB] : shapeB, { dtype });
    const out = matmul(a, b, { transA: ta, transB: tb, outDtype });
    // The inputs as the kernel sees them (bf16 rounded), and C's raw bits.
    const av = Float32Array.from(await a.toArray());
    const bv = Float32Array.from(await b.toArray());
    const bytes = Buffer.from(await out.toBytes());
    const got =
      outDtype === 'fp32' ? new Uint32Array(bytes.buffer, bytes.byteOffset, batch * m * n) : new Uint16Array(bytes.buffer, bytes.byteOffset, batch * m * n);
    const where = `${dtype}->${outDtype} batch=${batch} m=${m} n=${n} k=${k} transA=${ta} transB=${tb}`;
    const bits32 = new Uint32Array(1);
    const view32 = new Float32Array(bits32.buffer);
    for (let q = 0; q < batch; q++) {
      const ao = q * m * k,
        bo = q * k * n;
      for (let i = 0; i < m; i++) {
        if (i % rowStep !== 0 && i !== m - 1) continue;
        for (let j = 0; j < n; j++) {
          let sliced = 0;
          let whole = 0;
          let acc = 0;
          for (let p = 0; p < k; p++) {
            const x = av[ao + (ta ? p * m + i : i * k + p)]!;
            const y = bv[bo + (tb ? j * k + p : p * n + j)]!;
            acc = fmaf(x, y, acc);
            whole = fmaf(x, y, whole);
            if ((p + 1) % KC === 0 || p === k - 1) {
              sliced = p < KC ? acc : Math.fround(sliced + acc);
              acc = 0;
            }
          }
          view32[0] = sliced;
          const want = outDtype === 'fp32' ? bits32[0]! : bf16Bits(sliced);
          const at = q * m * n + i * n + j;
          if (got[at] !== want) {
            throw new Error(`${where}: C[${q}][${i}][${j}] has bits ${got[at]!.toString(16)}, the in-order FMA chain gives ${want.toString(16)}`);
          }
          if (Math.fround(whole) !== sliced) unslicedDiffers++;
        }
      }
    }
    for (const t of [a, b, out]) t.release();
  }
  return unslicedDiffers;
}

const hasAvx2 = (() => {
  const f = loadNative().cpuFeatures();
  return f.avx2 && f.fma;
})();

describe.runIf(hasAvx2)('avx2 fp32 matmul: each element is the same in-order FMA chain per 256-deep k slice', () => {
  it('odd sizes and tails around the 6 x 16 tile, every transpose, one and two k slices', async () => {
    expect(loadNative().setMatmulKernel('avx2').fp32).toBe('avx2-fma');
    for (const m of [1, 5, 7, 13, 64]) {
      for (const n of [1, 15, 17, 33]) {
        for (const k of [1, 9, 257]) await checkCase({ m, n, k });
      }
    }
  }, 300_000);

  it('B in place and packed, row blocks, column panels, a batch, K past two slices', async () => {
    expect(loadNative().setMatmulKernel('avx2').fp32).toBe('avx2-fma');
    const differs = [
      await checkCase({ m: 64, n: 128, k: 128 }), // B in place (16 Ki floats)
      await checkCase({ m: 64, n: 129, k: 128 }), // B packed, masked edge
      await checkCase({ m: 151, n: 37, k: 70 }), // two row blocks
      await checkCase({ m: 9, n: 300, k: 600, rowStep: 2 }), // two column panels, three k slices
      await checkCase({ m: 20, n: 24, k: 300, batch: 2 }),
    ];
    // The unsliced oracle (one chain over all of k) differs where k > 256: the check can see the order.
    expect(differs[3]! + differs[4]!).toBeGreaterThan(0);
  }, 300_000);

  it('A packed (every dim >= 512), with tails in every dim', async () => {
    expect(loadNative().setMatmulKernel('avx2').fp32).toBe('avx2-fma');
    const differs = await checkCase({ m: 515, n: 529, k: 520, rowStep: 37 });
    expect(differs).toBeGreaterThan(0);
  }, 600_000);

  it('bf16 inputs and bf16 output', async () => {
    expect(loadNative().setMatmulKernel('avx2').fp32).toBe('avx2-fma');
    await checkCase({ m: 13, n: 33, k: 300, dtype: 'bf16' });
    await checkCase({ m: 13, n: 33, k: 300, outDtype: 'bf16' });
    await checkCase({ m: 7, n: 17, k: 40, dtype: 'bf16', outDtype: 'bf16', batch: 2 });
  }, 300_000);
});
