/**
 * The bf16 matmul (native/kernels/matmul_bf16.cc on a CPU with AVX-512 BF16, else the fp32
 * micro-kernels on converted values): odd shapes on every dim and transpose, batched, both
 * output dtypes, against the fp64 product of the bf16-rounded inputs, on the auto kernel and
 * on the forced fallback; and the half pair an odd k ends in never reads past its row.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Device, Tensor, loadNative, matmul } from '../src/runtime/device/device-index.js';

const d = Device.get(0);
const native = loadNative();
const hasBf16Kernel = native.cpuFeatures().avx512bf16;

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

describe('matmul: bf16 inputs', () => {
  it('uses vdpbf16ps exactly when the CPU has it', () => {
    expect(native.setMatmulKernel('auto').bf16).toBe(hasBf16Kernel ? 'avx512-bf16' : native.setMatmulKernel('auto').fp32);
    expect(native.setMatmulKernel('avx2').bf16).not.toBe('avx512-bf16');
  });

  for (const mode of ['auto', 'avx2'] as const) {
    it(`odd shapes (1, 7, 63, 65, 255, 257 per dim), every transpose, batched, match the fp64 product on the ${mode === 'auto' ? 'auto kernel' : 'fp32 fallback'}`, async () => {
      native.setMatmulKernel(mode);
      for (let s = 0; s < CASES.length; s++) await expectProduct(CASES[s]!, s % 5 === 0 ? 'bf16' : 'fp32', 10 + s, mode);
    }, 120_000);
  }

  it('an odd k never mixes in the element after a row (inf there stays out of the product)', async () => {
    // k = 3: a row's last element is a half pair; the next bf16 in memory is the next row's
    // first (inf), or for the last row, nothing of A at all. B transposed has the same layout.
    const m = 5,
      n = 33,
      k = 3;
    for (const tb of [false, true]) {
      const a32 = randomBf16Exact(m * k, 1);
      for (let i = 1; i < m; i++) a32[i * k] = i === 2 ? Infinity : a32[i * k]!;
      const b32 = randomBf16Exact(k * n, 2);
      if (tb) b32[k] = -Infinity; // row 1 of stored B starts with -inf: column 1 of op(B)
      const a = Tensor.fromArray(d, a32, [m, k], { dtype: 'bf16' });
      const b = Tensor.fromArray(d, b32, tb ? [n, k] : [k, n], { dtype: 'bf16' });
      const got = await matmul(a, b, { transB: tb }).toArray();
      a.release();
      b.release();
      const want = product(a32, b32, 1, m, n, k, false, tb);
      for (let i = 0; i < want.length; i++) {
        const w = want[i]!;
        if (Number.isFinite(w)) expect(Math.abs(got[i]! - w), `element ${i} (transB=${tb})`).toBeLessThanOrEqual(1e-5 * Math.max(1, Math.abs(w)));
        else expect(got[i], `element ${i} (transB=${tb})`).toBe(w);
      }
      // Row 1 sits just before the inf row, and every column of op(B) but the -inf one stays finite.
      expect(got.slice(1 * n, 2 * n).filter((x) => Number.isFinite(x)).length).toBe(tb ? n - 1 : n);
    }
  });
});
