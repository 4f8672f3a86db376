/**
 * The bf16 matmul kernels: AMX tiles (native/kernels/matmul_amx.cc), AVX-512 BF16 pairs
 * (matmul_bf16.cc) and the fallback (the fp32 micro-kernels on converted values), each one this
 * CPU has, forced in turn: odd shapes on every dim and transpose, batched, both output dtypes,
 * and the shapes around AMX's 16-row, 16-column and 32-k tile edges and its 512-k slice, against
 * the fp64 product of the bf16-rounded inputs; and the half pair an odd k ends in never reads
 * past its row. Auto picks AMX, then AVX-512 BF16, then the fallback.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Device, Tensor, loadNative, matmul } from '../src/runtime/device/device-index.js';

const d = Device.get(0);
const native = loadNative();
const features = native.cpuFeatures();

/** Each bf16 kernel, the test-hook mode that forces it, and why this CPU cannot run it (null: it can). */
const KERNELS = [
  { mode: 'amx', bf16: 'amx-bf16', whyNot: features.amx ? null : `AMX is not usable here: ${features.amxWhyNot}` },
  { mode: 'avx512', bf16: 'avx512-bf16', whyNot: features.avx512bf16 ? null : 'the CPU lacks AVX-512 BF16' },
  { mode: 'avx2', bf16: features.avx2 && features.fma ? 'avx2-fma' : 'portable', whyNot: null },
] as const;
for (const k of KERNELS) if (k.whyNot !== null) console.log(`matmul-bf16: skipping the ${k.bf16} kernel: ${k.whyNot}`);

afterEach(() => {
  native.setMatmulKernel('auto');
});

/** Deterministic values in [-2, 2), already bf16-exact (so the fp64 product is the exact target). */
function randomBf16Exact(n: number, seed: number): Float32Array {
  let x = seed >>> 0 || 1;
  const out = new Float32Array(n);
  const u = new Uint32Array(out.buffer);
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = (x / 2 ** 32) * 4 - 2;
    u[i] = (u[i]! >>> 16) << 16;
  }
  return out;
}

function product(a: Float32Array, b: Float32Array, batch: number, m: number, n: number, k: number, ta: boolean, tb: boolean): Float64Array {
  const c = new Float64Array(batch * m * n);
  for (let q = 0; q < batch; q++)
    for (let i = 0; i < m; i++)
      for (let j = 0; j < n; j++) {
        let acc = 0;
        for (let p = 0; p < k; p++) acc += a[q * m * k + (ta ? p * m + i : i * k + p)]! * b[q * k * n + (tb ? j * k + p : p * n + j)]!;
        c[q * m * n + i * n + j] = acc;
      }
  return c;
}

interface Case {
  batch: number;
  m: number;
  n: number;
  k: number;
  ta: boolean;
  tb: boolean;
}

async function expectProduct(c: Case, outDtype: 'fp32' | 'bf16', seed: number, what: string): Promise<void> {
  const { batch, m, n, k, ta, tb } = c;
  const a32 = randomBf16Exact(batch * m * k, seed),
    b32 = randomBf16Exact(batch * k * n, seed + 1);
  const lead = batch > 1 ? [batch] : [];
  const a = Tensor.fromArray(d, a32, [...lead, ...(ta ? [k, m] : [m, k])], { dtype: 'bf16' });
  const b = Tensor.fromArray(d, b32, [...lead, ...(tb ? [n, k] : [k, n])], { dtype: 'bf16' });
  const out = matmul(a, b, { transA: ta, transB: tb, outDtype });
  expect(out.shape).toEqual([...lead, m, n]);
  const got = await out.toArray();
  for (const t of [a, b, out]) t.release();
  const want = product(a32, b32, batch, m, n, k, ta, tb);
  const tol = (outDtype === 'bf16' ? 2 ** -8 : 0) + 1e-5 * Math.sqrt(Math.max(1, k));
  for (let i = 0; i < want.length; i++) {
    if (!(Math.abs(got[i]! - want[i]!) <= tol * Math.max(1, Math.abs(want[i]!)))) {
      throw new Error(`${what} ${outDtype} batch=${batch} m=${m} n=${n} k=${k} transA=${ta} transB=${tb}: element ${i} is ${got[i]}, want ${want[i]}`);
    }
  }
}

// Every pair of (m, n) from the odd sizes, k cycling through them too (k odd and even, below,
// at and past 64-multiples), each in all four transposes.
const DIMS = [1, 7, 63, 65, 255, 257];
const CASES: Case[] = [];
for (let i = 0; i < DIMS.length; i++)
  for (let j = 0; j < DIMS.length; j++)
    for (const t of [0, 1, 2, 3]) {
      const k = DIMS[(i + 2 * j + t) % DIMS.length]!;
      CASES.push({ batch: 1, m: DIMS[i]!, n: DIMS[j]!, k, ta: (t & 1) === 1, tb: (t & 2) === 2 });
    }
// Batched, and past one k slice (512) and one column panel (512) of the bf16 kernel.
for (const t of [0, 1, 2, 3]) {
  CASES.push({ batch: 3, m: 65, n: 33, k: 63, ta: (t & 1) === 1, tb: (t & 2) === 2 });
  CASES.push({ batch: 1, m: 150, n: 530, k: 1027, ta: (t & 1) === 1, tb: (t & 2) === 2 });
}

// Around AMX's edges: m, n below, at and past one and two 16-wide tiles; k below, at and past
// one and two 32-deep tiles, and past one 512-deep slice; every transpose.
const EDGE_MN = [1, 15, 16, 17, 33, 100];
const EDGE_K = [1, 2, 31, 32, 33, 63, 64, 65, 600];
const EDGE_CASES: Case[] = [];
for (const m of EDGE_MN)
  for (const n of EDGE_MN) for (const k of EDGE_K) for (const t of [0, 1, 2, 3]) EDGE_CASES.push({ batch: 1, m, n, k, ta: (t & 1) === 1, tb: (t & 2) === 2 });

describe('matmul: bf16 inputs', () => {
  it('auto picks AMX, then AVX-512 BF16, then the fp32 kernel; every forced mode names the kernel it runs', () => {
    const fallback = native.setMatmulKernel('auto').fp32;
    const best = features.amx ? 'amx-bf16' : features.avx512bf16 ? 'avx512-bf16' : fallback;
    expect(native.setMatmulKernel('auto').bf16).toBe(best);
    expect(native.setMatmulKernel('amx').bf16).toBe(best);
    expect(native.setMatmulKernel('avx512').bf16).toBe(features.avx512bf16 ? 'avx512-bf16' : fallback);
    expect(native.setMatmulKernel('avx2').bf16).toBe(KERNELS[2].bf16);
    expect(() => native.setMatmulKernel('amx-bf16' as never)).toThrow(/Expected 'auto', 'portable', 'avx2', 'avx512' or 'amx'/);
  });

  for (const { mode, bf16, whyNot } of KERNELS) {
    it.skipIf(whyNot !== null)(
      `${bf16}: odd shapes (1, 7, 63, 65, 255, 257 per dim), every transpose, batched, match the fp64 product`,
      async () => {
        expect(native.setMatmulKernel(mode).bf16).toBe(bf16);
        for (let s = 0; s < CASES.length; s++) await expectProduct(CASES[s]!, s % 5 === 0 ? 'bf16' : 'fp32', 10 + s, bf16);
      },
      120_000,
    );

    it.skipIf(whyNot !== null)(
      `${bf16}: m, n in {1, 15, 16, 17, 33, 100} x k in {1, 2, 31 ... 65, 600}, every transpose, match the fp64 product`,
      async () => {
        expect(native.setMatmulKernel(mode).bf16).toBe(bf16);
        for (let s = 0; s < EDGE_CASES.length; s++) await expectProduct(EDGE_CASES[s]!, s % 7 === 0 ? 'bf16' : 'fp32', 1000 + s, bf16);
      },
      120_000,
    );
  }

  // A row's last element, or an odd k's half pair, is followed in memory by the next row's first
  // element: inf there, read and multiplied by a zero pad, would turn the row's products into NaN.
  // k = 3 is one half pair; 33, 63 and 65 end in a partial 32-deep AMX tile (whole tiles are read
  // in place, partial ones must not be). Every third row of A starts with inf, and with B
  // transposed every third column of op(B) starts with -inf (the rows of stored B have the same layout).
  for (const { mode, bf16, whyNot } of KERNELS) {
    it.skipIf(whyNot !== null)(`${bf16}: the element after a row never enters the product (inf there stays out)`, async () => {
      expect(native.setMatmulKernel(mode).bf16).toBe(bf16);
      for (const [m, n, k] of [
        [5, 33, 3],
        [33, 33, 33],
        [20, 17, 63],
        [40, 40, 65],
      ] as const) {
        for (const tb of [false, true]) {
          const a32 = randomBf16Exact(m * k, 1);
          for (let i = 2; i < m; i += 3) a32[i * k] = Infinity;
          const b32 = randomBf16Exact(k * n, 2);
          if (tb) for (let j = 1; j < n; j += 3) b32[j * k] = -Infinity;
          const a = Tensor.fromArray(d, a32, [m, k], { dtype: 'bf16' });
          const b = Tensor.fromArray(d, b32, tb ? [n, k] : [k, n], { dtype: 'bf16' });
          const out = matmul(a, b, { transB: tb });
          const got = await out.toArray();
          for (const t of [a, b, out]) t.release();
          const want = product(a32, b32, 1, m, n, k, false, tb);
          const what = (i: number) => `${bf16} m=${m} n=${n} k=${k} transB=${tb}: element ${i}`;
          for (let i = 0; i < want.length; i++) {
            const w = want[i]!;
            if (Number.isFinite(w)) expect(Math.abs(got[i]! - w), what(i)).toBeLessThanOrEqual(1e-5 * Math.sqrt(k) * Math.max(1, Math.abs(w)));
            else expect(got[i], what(i)).toBe(w);
          }
          // A row before an inf row keeps every column finite but the -inf ones.
          const infCols = tb ? Math.floor((n + 1) / 3) : 0;
          expect(got.slice(1 * n, 2 * n).filter((x) => Number.isFinite(x)).length, `${bf16} m=${m} n=${n} k=${k} transB=${tb}: row 1`).toBe(n - infCols);
        }
      }
    });
  }
});
