import { describe, expect, it } from 'vitest';
import {
  DTYPES,
  Device,
  Tensor,
  add,
  loadNative,
  arange,
  axpy,
  cast,
  fill,
  matmul,
  mul,
  permute,
  scale,
  scaleElementsInPlace,
  transpose,
  type DType,
  type KernelImpl,
} from '../src/runtime/device/device-index.js';
import { viewOf } from '../src/runtime/device/views.js';

const d = Device.get(0);

/** Deterministic pseudo-random values (xorshift), in [-2, 2) with a few specials. */
function randomF32(n: number, seed: number, specials = false): Float32Array {
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
  if (specials && n >= 8) out.set([NaN, Infinity, -Infinity, 0, -0, 3e38, 1e-40, 70000.5], 0);
  return out;
}

function sample(dtype: DType, n: number, seed: number): Tensor {
  const f = randomF32(n, seed, true);
  const src = Tensor.fromArray(d, f, [n]);
  if (dtype === 'fp32') return src;
  // Integers: scale up so casts exercise wrap/saturation; cast on the device.
  const wide = dtype === 'fp32' ? src : scale(src, dtype === 'uint8' ? 100 : 1e6);
  const t = cast(wide, dtype, { impl: 'reference' });
  src.release();
  if (wide !== src) wide.release();
  return t;
}

async function bytesOf(t: Tensor): Promise<number[]> {
  return Array.from(await t.toBytes());
}

async function expectParity(run: (impl: KernelImpl) => Tensor): Promise<void> {
  const fast = run('fast');
  const ref = run('reference');
  expect(await bytesOf(fast)).toEqual(await bytesOf(ref));
  fast.release();
  ref.release();
}

async function bf16Bits(values: number[]): Promise<number[]> {
  const t = cast(Tensor.fromArray(d, Float32Array.from(values), [values.length]), 'bf16');
  return Array.from(new Uint16Array((await t.toBytes()).buffer));
}

async function fp16Bits(values: number[]): Promise<number[]> {
  const t = cast(Tensor.fromArray(d, Float32Array.from(values), [values.length]), 'fp16');
  return Array.from(new Uint16Array((await t.toBytes()).buffer));
}

describe('kernels: fast vs reference', () => {
  it('fill and arange agree for every dtype', async () => {
    for (const dtype of DTYPES) {
      await expectParity((impl) => {
        const t = Tensor.empty(d, [37], dtype);
        fill(t, -3.75, { impl });
        return t;
      });
      await expectParity((impl) => arange(d, 101, { start: -5.5, step: 0.25, dtype, impl }));
    }
  });

  it('cast agrees for all dtype pairs (NaN, inf, saturation, wrap)', async () => {
    for (const from of DTYPES) {
      const src = sample(from, 257, 7);
      for (const to of DTYPES) await expectParity((impl) => cast(src, to, { impl }));
      src.release();
    }
  });

  it('add, mul, scale and axpy agree for every supported dtype', async () => {
    for (const dtype of DTYPES) {
      const a = sample(dtype, 1000, 11);
      const b = sample(dtype, 1000, 12);
      await expectParity((impl) => add(a, b, { impl }));
      await expectParity((impl) => mul(a, b, { impl }));
      if (dtype === 'fp32' || dtype === 'bf16' || dtype === 'fp16') {
        await expectParity((impl) => scale(a, -1.5, { impl }));
        await expectParity((impl) => {
          const y = cast(a, dtype);
          axpy(y, 0.3, b, { impl });
          return y;
        });
      }
    }
  });

  it('scaleElementsInPlace writes exactly what scale() returns, into x itself (a view inside a larger buffer)', async () => {
    for (const dtype of ['fp32', 'bf16', 'fp16'] as const) {
      const a = cast(Tensor.fromArray(d, randomF32(1000, 31, true), [1000]), dtype);
      const want = await scale(a, -0.37).toArray();
      const inner = viewOf(a, [800], 100);
      const before = await a.toArray();
      scaleElementsInPlace(inner, -0.37);
      const got = await a.toArray();
      // The view's elements are scaled bit for bit as scale() does; the rest of the buffer is untouched.
      expect(Array.from(got.slice(100, 900))).toEqual(Array.from(want.slice(100, 900)));
      expect(Array.from(got.slice(0, 100))).toEqual(Array.from(before.slice(0, 100)));
      expect(Array.from(got.slice(900))).toEqual(Array.from(before.slice(900)));
    }
    const ints = Tensor.fromArray(d, new Int32Array([1, 2]), [2]);
    expect(() => scaleElementsInPlace(ints, 2)).toThrow(/scale\(\) supports fp32, bf16 and fp16 but received int32/);
  });

  it('permute and transpose agree and match a JS gather', async () => {
    const shape = [3, 4, 5, 2];
    const n = 3 * 4 * 5 * 2;
    const src = Tensor.fromArray(
      d,
      Float32Array.from({ length: n }, (_, i) => i),
      shape,
    );
    const dims = [2, 0, 3, 1];
    await expectParity((impl) => permute(src, dims, { impl }));
    const out = await permute(src, dims).toArray();
    const outShape = dims.map((k) => shape[k]!);
    const strides = [40, 10, 2, 1];
    let i = 0;
    for (let a = 0; a < outShape[0]!; a++)
      for (let b = 0; b < outShape[1]!; b++)
        for (let c = 0; c < outShape[2]!; c++)
          for (let e = 0; e < outShape[3]!; e++) {
            const idx = [a, b, c, e];
            const srcIdx = dims.reduce((acc, k, j) => acc + idx[j]! * strides[k]!, 0);
            expect(out[i++]).toBe(srcIdx);
          }
    for (const dtype of ['bf16', 'int64', 'uint8'] as const) {
      const t = cast(src, dtype);
      await expectParity((impl) => transpose(t, 0, 3, { impl }));
    }
    const tt = transpose(src);
    expect(tt.shape).toEqual([3, 4, 2, 5]);
  });
});

describe('kernels: dtype conversions', () => {
  it('rounds fp32 -> bf16 to nearest even and keeps NaN', async () => {
    const bits = await bf16Bits([1, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -2.5, Infinity, 3.4028234663852886e38, 0, -0, NaN]);
    expect(bits.slice(0, 9)).toEqual([0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xc020, 0x7f80, 0x7f80, 0x0000, 0x8000]);
    expect(bits[9]! & 0x7f80).toBe(0x7f80);
    expect(bits[9]! & 0x007f).not.toBe(0);
    const back = await cast(Tensor.fromArray(d, new Uint16Array(bits), [bits.length], { dtype: 'bf16' }), 'fp32').toArray();
    expect(Number.isNaN(back[9])).toBe(true);
    expect(back[2]).toBe(1 + 2 ** -6);
  });

  it('rounds fp32 -> fp16 to nearest even (normals, subnormals, overflow) and keeps NaN', async () => {
    const bits = await fp16Bits([1, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 65504, 65519, 65520, 2 ** -24, 2 ** -25, 3 * 2 ** -25, 2 ** -14, -2, NaN]);
    expect(bits).toEqual([0x3c00, 0x3c00, 0x3c02, 0x7bff, 0x7bff, 0x7c00, 0x0001, 0x0000, 0x0002, 0x0400, 0xc000, 0x7e00]);
  });

  it('casts floats to integers by truncation with saturation (NaN -> 0) and wraps integers', async () => {
    const f = Tensor.fromArray(d, [1.9, -1.9, 3e9, -3e9, NaN, 300, -5], [7]);
    expect(Array.from(await cast(f, 'int32').toArray())).toEqual([1, -1, 2147483647, -2147483648, 0, 300, -5]);
    expect(Array.from(await cast(f, 'uint8').toArray())).toEqual([1, 0, 255, 0, 0, 255, 0]);
    const big = Tensor.fromArray(d, BigInt64Array.from([2n ** 32n + 5n, -1n]), [2]);
    expect(Array.from(await cast(big, 'int32').toArray())).toEqual([5, -1]);
    expect(Array.from(await cast(big, 'uint8').toArray())).toEqual([5, 255]);
  });
});

describe('kernels: matmul', () => {
  function jsMatmul(a: Float32Array, b: Float32Array, batch: number, m: number, n: number, k: number, ta: boolean, tb: boolean): Float64Array {
    const c = new Float64Array(batch * m * n);
    for (let q = 0; q < batch; q++)
      for (let i = 0; i < m; i++)
        for (let j = 0; j < n; j++) {
          let acc = 0;
          for (let p = 0; p < k; p++) {
            const av = a[q * m * k + (ta ? p * m + i : i * k + p)]!;
            const bv = b[q * k * n + (tb ? j * k + p : p * n + j)]!;
            acc += av * bv;
          }
          c[q * m * n + i * n + j] = acc;
        }
    return c;
  }

  function roundBf16(values: Float32Array): Float32Array {
    const u = new Uint32Array(values.buffer.slice(0));
    for (let i = 0; i < u.length; i++) u[i] = ((u[i]! + 0x7fff + ((u[i]! >>> 16) & 1)) >>> 16) << 16;
    return new Float32Array(u.buffer);
  }

  const cases: [number, number, number, number][] = [
    [1, 1, 1, 1],
    [1, 7, 13, 5],
    [2, 33, 17, 65],
    [1, 70, 130, 300],
    [3, 6, 16, 9],
    [1, 125, 19, 257],
    // Blocking edges of the fast kernel: two MC blocks with ragged slivers (m=151), two
    // NC panels (n > 2048), three KC slices (k=530), and an empty inner dim (C = 0).
    [1, 151, 37, 530],
    [1, 7, 2085, 3],
    [2, 5, 7, 0],
    // The AVX-512 fp32 path packs a row-major B only past 64 Ki floats per k slice
    // (k=257: 256 x 300, then a 1-deep slice), and in two 1024-wide panels past n = 1024.
    [1, 13, 300, 257],
    [1, 9, 1100, 70],
  ];

  for (const [batch, m, n, k] of cases) {
    for (const [ta, tb] of [
      [false, false],
      [true, false],
      [false, true],
      [true, true],
    ] as const) {
      it(`batch=${batch} m=${m} n=${n} k=${k} transA=${ta} transB=${tb}`, async () => {
        const aShape = ta ? [k, m] : [m, k];
        const bShape = tb ? [n, k] : [k, n];
        const a32 = randomF32(batch * m * k, 100 + m);
        const b32 = randomF32(batch * k * n, 200 + n);
        const lead = batch > 1 ? [batch] : [];
        for (const inDtype of ['fp32', 'bf16'] as const) {
          const a = Tensor.fromArray(d, a32, [...lead, ...aShape], { dtype: inDtype });
          const b = Tensor.fromArray(d, b32, [...lead, ...bShape], { dtype: inDtype });
          const ain = inDtype === 'bf16' ? roundBf16(a32) : a32;
          const bin = inDtype === 'bf16' ? roundBf16(b32) : b32;
          const want = jsMatmul(ain, bin, batch, m, n, k, ta, tb);
          for (const outDtype of ['fp32', 'bf16'] as const) {
            for (const impl of ['fast', 'reference'] as const) {
              const c = matmul(a, b, { transA: ta, transB: tb, outDtype, impl });
              expect(c.shape).toEqual([...lead, m, n]);
              const got = await c.toArray();
              const tol = (outDtype === 'bf16' ? 2 ** -8 : 0) + 1e-5 * Math.sqrt(k);
              for (let i = 0; i < want.length; i++) {
                const w = want[i]!;
                if (Math.abs(got[i]! - w) > tol * Math.max(1, Math.abs(w)) * 4) {
                  throw new Error(`${impl} ${inDtype}->${outDtype} mismatch at ${i}: got ${got[i]} want ${w}`);
                }
              }
              c.release();
            }
          }
          a.release();
          b.release();
        }
      });
    }
  }

  it('every micro-kernel this CPU has (portable, avx2-fma, avx512, avx512-bf16 pairs, amx-bf16 tiles) matches the fp64 product, fp32 and bf16 inputs', async () => {
    const native = loadNative();
    const f = native.cpuFeatures();
    const modes = [
      { mode: 'portable' as const, fp32: 'portable', bf16: 'portable', vec: 'portable' },
      ...(f.avx2 && f.fma ? [{ mode: 'avx2' as const, fp32: 'avx2-fma', bf16: 'avx2-fma', vec: 'avx2-fma' }] : []),
      // The model kernels' vectors stay on AVX2 beside the AVX-512 matmul (they once fell to the portable loops there).
      ...(f.avx512f
        ? [{ mode: 'avx512' as const, fp32: 'avx512', bf16: f.avx512bf16 ? 'avx512-bf16' : 'avx512', vec: f.avx2 && f.fma ? 'avx2-fma' : 'portable' }]
        : []),
      ...(f.amx ? [{ mode: 'amx' as const, fp32: 'avx512', bf16: 'amx-bf16', vec: f.avx2 && f.fma ? 'avx2-fma' : 'portable' }] : []),
    ];
    try {
      for (const m of modes) {
        expect(native.setMatmulKernel(m.mode)).toEqual({ fp32: m.fp32, bf16: m.bf16, vec: m.vec });
        for (const [batch, mm, n, k] of cases) {
          for (const inDtype of ['fp32', 'bf16'] as const) {
            const a32 = randomF32(batch * mm * k, 5),
              b32 = randomF32(batch * k * n, 6);
            const lead = batch > 1 ? [batch] : [];
            const a = Tensor.fromArray(d, a32, [...lead, k, mm], { dtype: inDtype });
            const b = Tensor.fromArray(d, b32, [...lead, n, k], { dtype: inDtype });
            const want = jsMatmul(inDtype === 'bf16' ? roundBf16(a32) : a32, inDtype === 'bf16' ? roundBf16(b32) : b32, batch, mm, n, k, true, true);
            const got = await matmul(a, b, { transA: true, transB: true }).toArray();
            for (let i = 0; i < want.length; i++) {
              if (Math.abs(got[i]! - want[i]!) > 1e-5 * Math.sqrt(Math.max(1, k)) * Math.max(1, Math.abs(want[i]!))) {
                throw new Error(`${m.mode} ${inDtype} [${batch}, ${mm}, ${n}, ${k}] mismatch at ${i}: got ${got[i]} want ${want[i]}`);
              }
            }
            a.release();
            b.release();
          }
        }
      }
    } finally {
      native.setMatmulKernel('auto');
    }
    const auto = native.setMatmulKernel('auto');
    expect(auto.fp32).toBe(f.avx512f ? 'avx512' : f.avx2 && f.fma ? 'avx2-fma' : 'portable');
    expect(auto.bf16).toBe(f.amx ? 'amx-bf16' : f.avx512bf16 ? 'avx512-bf16' : auto.fp32);
    expect(auto.vec).toBe(f.avx2 && f.fma ? 'avx2-fma' : 'portable');
    expect(() => native.setMatmulKernel('sse' as never)).toThrow(/Expected 'auto', 'portable', 'avx2', 'avx512' or 'amx'/);
  });

  it('odd shapes (1, 7, 63, 65, 129 on every dim, every transpose) match the fp64 product on every fp32 micro-kernel this CPU has', async () => {
    const native = loadNative();
    const f = native.cpuFeatures();
    const modes = ['portable' as const, ...(f.avx2 && f.fma ? ['avx2' as const] : []), ...(f.avx512f ? ['avx512' as const] : [])];
    const dims = [1, 7, 63, 65, 129];
    const shapes: [number, number, number, boolean, boolean][] = [];
    for (const m of dims) for (const n of dims) for (const k of dims) for (const t of [0, 1, 2, 3]) shapes.push([m, n, k, (t & 1) === 1, (t & 2) === 2]);
    const inputs = shapes.map(([m, n, k, ta, tb], i) => {
      const a32 = randomF32(m * k, 300 + i),
        b32 = randomF32(k * n, 700 + i);
      return {
        a: Tensor.fromArray(d, a32, ta ? [k, m] : [m, k]),
        b: Tensor.fromArray(d, b32, tb ? [n, k] : [k, n]),
        want: jsMatmul(a32, b32, 1, m, n, k, ta, tb),
      };
    });
    try {
      for (const mode of modes) {
        native.setMatmulKernel(mode);
        for (let s = 0; s < shapes.length; s++) {
          const [m, n, k, ta, tb] = shapes[s]!;
          const { a, b, want } = inputs[s]!;
          const c = matmul(a, b, { transA: ta, transB: tb });
          const got = await c.toArray();
          c.release();
          for (let i = 0; i < want.length; i++) {
            if (Math.abs(got[i]! - want[i]!) > 1e-5 * Math.sqrt(k) * Math.max(1, Math.abs(want[i]!))) {
              throw new Error(`${mode} m=${m} n=${n} k=${k} transA=${ta} transB=${tb} mismatch at ${i}: got ${got[i]} want ${want[i]}`);
            }
          }
        }
      }
    } finally {
      native.setMatmulKernel('auto');
      for (const { a, b } of inputs) {
        a.release();
        b.release();
      }
    }
  }, 120_000);

  it('column tiles whole and partial (m, n, k in 1, 15, 16, 17, 31, 32, 33, 63, 64, 65; every transpose) match the fp64 product on the fp32 kernel', async () => {
    // The AVX-512 kernel runs a 32-wide column tile unmasked when all 32 columns are C's (n = 32,
    // 64) and masked on the last, partial one (n = 33, 65): both kinds, and their mix, on every form.
    const dims = [1, 15, 16, 17, 31, 32, 33, 63, 64, 65];
    let s = 0;
    for (const m of dims) {
      for (const n of dims) {
        for (const k of dims) {
          for (const t of [0, 1, 2, 3]) {
            const ta = (t & 1) === 1,
              tb = (t & 2) === 2;
            const a32 = randomF32(m * k, 1300 + s),
              b32 = randomF32(k * n, 1700 + s++);
            const a = Tensor.fromArray(d, a32, ta ? [k, m] : [m, k]),
              b = Tensor.fromArray(d, b32, tb ? [n, k] : [k, n]);
            const c = matmul(a, b, { transA: ta, transB: tb });
            const got = await c.toArray();
            const want = jsMatmul(a32, b32, 1, m, n, k, ta, tb);
            a.release();
            b.release();
            c.release();
            expect(got.length).toBe(m * n);
            for (let i = 0; i < want.length; i++) {
              if (!(Math.abs(got[i]! - want[i]!) <= 1e-5 * Math.sqrt(k) * Math.max(1, Math.abs(want[i]!)))) {
                throw new Error(`m=${m} n=${n} k=${k} transA=${ta} transB=${tb} mismatch at ${i}: got ${got[i]} want ${want[i]}`);
              }
            }
          }
        }
      }
    }
  }, 120_000);

  it('rejects mismatched inner dims before enqueueing', () => {
    const a = Tensor.empty(d, [3, 4]);
    const b = Tensor.empty(d, [5, 2]);
    const before = d.defaultStream.stats().enqueued;
    expect(() => matmul(a, b)).toThrow(/inner dims differ: op\(a\) is \[3, 4\] and op\(b\) is \[5, 2\]/);
    expect(d.defaultStream.stats().enqueued).toBe(before);
  });
});

describe('Tensor.reshape', () => {
  it('views the same memory with another shape and refuses impossible shapes', async () => {
    const { Device, Tensor } = await import('../src/internal.js');
    const dev = Device.get(0);
    const t = Tensor.fromArray(dev, new Float32Array([1, 2, 3, 4, 5, 6]), [6]);
    const v = t.reshape([2, -1]);
    expect(v.shape).toEqual([2, 3]);
    expect(Array.from(await v.toArray())).toEqual([1, 2, 3, 4, 5, 6]);
    expect(() => t.reshape([4, -1])).toThrow(/Cannot reshape a tensor of shape \[6\] \(6 elements\) to \[4, -1\]/);
    expect(() => t.reshape([-1, -1])).toThrow(/Only one dim/);
    expect(() => t.reshape([7])).toThrow(/Cannot reshape/);
    t.release();
    expect(v.released).toBe(true);
  });
});
