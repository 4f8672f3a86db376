/**
 * The vectorised fp32 <-> bf16 casts (native/kernels/cast_vec.cc: AVX-512 BW and AVX2 integer
 * lanes) against an oracle written here from the rounding rule, bit for bit, on every path this
 * CPU has (the setMatmulKernel test hook forces the portable and AVX2 paths), for lengths around
 * the vector widths and for sources and outputs that start off a vector boundary.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Device, Tensor, cast, loadNative } from '../src/runtime/device/device-index.js';
import { viewOf } from '../src/runtime/device/views.js';
import { DTYPE_CODE } from '../src/runtime/device/dtype.js';
import { BUFFER_HANDLE } from '../src/runtime/native.js';

const d = Device.get(0);
const native = loadNative();
const f = native.cpuFeatures();
const modes = ['portable' as const, ...(f.avx2 && f.fma ? ['avx2' as const] : []), ...(f.avx512f ? ['avx512' as const] : [])];

afterAll(() => {
  native.setMatmulKernel('auto');
});

/** fp32 bits -> bf16 bits: NaN keeps sign and payload and gets the quiet bit; the rest rounds to nearest even. */
function oracleBf16(u: number): number {
  if ((u & 0x7fffffff) >>> 0 > 0x7f800000) return ((u >>> 16) | 0x40) & 0xffff;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

/** fp32 bit patterns of every class: ties, NaN payloads (signalling and quiet), denormals, infinities, ±0, random. */
function patterns(n: number, seed: number): Uint32Array {
  const special = [
    0x3f808000, 0x3f818000, 0xbf808000, 0x3f807fff, 0x3f808001, 0x7f800000, 0xff800000, 0x7f800001, 0xff800001, 0x7fc00000, 0x7fbfffff, 0x7f7fffff, 0x7f7f8000,
    0x00000001, 0x00008000, 0x00018000, 0x807fffff, 0x00000000, 0x80000000, 0xffffffff,
  ];
  const out = new Uint32Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = i % 3 === 0 ? special[(i / 3) % special.length]! : x;
  }
  return out;
}

async function u16(t: Tensor): Promise<Uint16Array> {
  const b = await t.toBytes();
  return new Uint16Array(b.buffer, b.byteOffset, b.byteLength / 2);
}

async function u32(t: Tensor): Promise<Uint32Array> {
  const b = await t.toBytes();
  return new Uint32Array(b.buffer, b.byteOffset, b.byteLength / 4);
}

describe('vectorised fp32 <-> bf16 casts', () => {
  const lengths = [1, 7, 8, 15, 16, 17, 31, 32, 33, 47, 1000, 4099];

  it.each(modes)('fp32 -> bf16 equals the rounding rule bit for bit on the %s path (tails and unaligned starts)', async (mode) => {
    native.setMatmulKernel(mode);
    const bits = patterns(4099 + 3, 17);
    const src = Tensor.fromArray(d, new Float32Array(bits.buffer), [bits.length]);
    let mismatches = 0;
    for (const offset of [0, 1, 3]) {
      for (const n of lengths) {
        const got = await u16(cast(viewOf(src, [n], offset), 'bf16'));
        for (let i = 0; i < n; i++) if (got[i] !== oracleBf16(bits[offset + i]!)) mismatches++;
        expect(got.length).toBe(n);
      }
    }
    expect(mismatches).toBe(0);
    src.release();
  });

  it.each(modes)('bf16 -> fp32 widens every bf16 pattern exactly on the %s path', async (mode) => {
    native.setMatmulKernel(mode);
    const all = new Uint16Array(65536 + 5);
    for (let i = 0; i < all.length; i++) all[i] = i & 0xffff;
    const src = Tensor.fromArray(d, all, [all.length], { dtype: 'bf16' });
    let mismatches = 0;
    for (const offset of [0, 5]) {
      const n = 65536;
      const got = await u32(cast(viewOf(src, [n], offset), 'fp32'));
      for (let i = 0; i < n; i++) if (got[i] !== (all[offset + i]! << 16) >>> 0) mismatches++;
    }
    for (const n of lengths) {
      const got = await u32(cast(viewOf(src, [n], 1), 'fp32'));
      for (let i = 0; i < n; i++) if (got[i] !== (all[1 + i]! << 16) >>> 0) mismatches++;
    }
    expect(mismatches).toBe(0);
    src.release();
  });

  it.each(modes)('writes exactly the elements it was given inside a larger buffer on the %s path', async (mode) => {
    native.setMatmulKernel(mode);
    const stream = d.defaultStream;
    for (const n of [1, 15, 17, 33, 100]) {
      const out = Tensor.zeros(d, [n + 40], 'bf16');
      const src = Tensor.fromArray(
        d,
        Float32Array.from({ length: n }, (_, i) => i + 1),
        [n],
      );
      // Elements [3, 3 + n) of `out`, through the native call the Tensor API makes (cast() always
      // allocates a fresh output at offset 0).
      stream.native.cast(out.buffer[BUFFER_HANDLE], 3 * 2, DTYPE_CODE.bf16, src.buffer[BUFFER_HANDLE], 0, DTYPE_CODE.fp32, n, 0, 0);
      const got = await u16(out);
      const want = new Array(n + 40).fill(0);
      for (let i = 0; i < n; i++) want[3 + i] = oracleBf16(new Uint32Array(new Float32Array([i + 1]).buffer)[0]!);
      expect(Array.from(got)).toEqual(want);
      out.release();
      src.release();
    }
  });
});
