/**
 * K.kvCacheWrite (native/kernels/model/kv_write.cc), the rollout KV cache's one-op-per-layer
 * write: both impls against the per-row copies it replaced (bit-exact, untouched cache
 * positions kept), KvCache.write through it, bad positions failing the stream before anything
 * is written, and bad shapes / dtypes refused before anything is enqueued.
 */
import { describe, expect, it } from 'vitest';
import { Device, Tensor, type KernelImpl, type Stream } from '../src/runtime/device/device-index.js';
import { copy } from '../src/runtime/device/ops.js';
import { InvalidArgumentError, StreamError } from '../src/runtime/errors.js';
import * as K from '../src/model/kernels/index.js';
import { KvCache } from '../src/rollout/kv-cache.js';

const d = Device.get(0);
const IMPLS: KernelImpl[] = ['fast', 'reference'];

/** Deterministic values in [-1, 1) (a distinct stream per seed). */
function rand(n: number, seed: number): Float32Array {
  let x = (seed * 2654435761) >>> 0 || 1;
  return Float32Array.from({ length: n }, () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 2 ** 31 - 1;
  });
}

const f32 = (data: Float32Array, shape: number[], stream?: Stream) => Tensor.fromArray(d, data, shape, { stream });
const i32 = (data: number[], stream?: Stream) => Tensor.fromArray(d, Int32Array.from(data), [data.length], { stream });

/** The write as it was before the kernel: one copy per row, for k and for v. */
function perRowCopies(kc: Tensor, vc: Tensor, k: Tensor, v: Tensor, pos: number[], count: number): void {
  const [, Smax, nKV, D] = kc.shape as [number, number, number, number];
  const row = nKV * D;
  for (const [src, dst] of [
    [k, kc],
    [v, vc],
  ] as const) {
    for (let b = 0; b < pos.length; b++) {
      const from = new Tensor(d, src.buffer, 'fp32', [count * row], undefined, src.byteOffset + b * count * row * 4);
      const to = new Tensor(d, dst.buffer, 'fp32', [count * row], undefined, dst.byteOffset + (b * Smax + pos[b]!) * row * 4);
      copy(to, from);
    }
  }
}

describe('kvCacheWrite', () => {
  // Prefill (count > 1, every row from 0), decode (count 1, ragged positions up to the last
  // one) and a middle write; odd sizes so no row is a power of two.
  const cases = [
    { B: 3, Smax: 11, nKV: 2, D: 5, count: 7, pos: [0, 0, 0] },
    { B: 4, Smax: 9, nKV: 3, D: 3, count: 1, pos: [8, 0, 5, 3] },
    { B: 2, Smax: 13, nKV: 1, D: 7, count: 4, pos: [9, 2] },
  ];

  it.each(cases)('equals the per-row copies bit for bit, positions it does not write kept (%o)', async ({ B, Smax, nKV, D, count, pos }) => {
    const cacheN = B * Smax * nKV * D,
      n = B * count * nKV * D;
    const k = f32(rand(n, 1), [B, count, nKV, D]),
      v = f32(rand(n, 2), [B, count, nKV, D]);
    const before = [rand(cacheN, 3), rand(cacheN, 4)];
    const shape = [B, Smax, nKV, D];
    const [wk, wv] = before.map((a) => f32(a, shape));
    perRowCopies(wk!, wv!, k, v, pos, count);
    const want = [await wk!.toArray(), await wv!.toArray()];
    // The copies really changed the cache (the comparison below is not of two untouched caches).
    expect(want[0]).not.toEqual(before[0]);
    for (const impl of IMPLS) {
      const [gk, gv] = before.map((a) => f32(a, shape));
      K.kvCacheWrite(gk!, gv!, k, v, i32(pos), { impl });
      expect(await gk!.toArray(), `${impl} k`).toEqual(want[0]);
      expect(await gv!.toArray(), `${impl} v`).toEqual(want[1]);
      gk!.release();
      gv!.release();
    }
    for (const t of [k, v, wk!, wv!]) t.release();
  });

  it('KvCache.write puts each row at its position in the first rows of the layer, other layers untouched', async () => {
    const shape = { layers: 2, maxBatch: 4, maxSeqLen: 6, kvHeads: 2, headDim: 3 };
    const cache = new KvCache(d, shape);
    try {
      const row = shape.kvHeads * shape.headDim,
        cacheN = shape.maxBatch * shape.maxSeqLen * row;
      const zero = new Float32Array(cacheN);
      for (let l = 0; l < 2; l++) {
        const all = cache.views(l, shape.maxBatch);
        copy(all.k, f32(zero, all.k.shape));
        copy(all.v, f32(zero, all.v.shape));
      }
      const B = 3,
        count = 2,
        pos = [4, 0, 2];
      const k = f32(rand(B * count * row, 5), [B * count, row]),
        v = f32(rand(B * count * row, 6), [B * count, row]);
      cache.write(1, k, v, i32(pos), count, d.defaultStream);
      const kh = await k.toArray(),
        vh = await v.toArray();
      const wantK = new Float32Array(cacheN),
        wantV = new Float32Array(cacheN);
      for (let b = 0; b < B; b++) {
        const at = (b * shape.maxSeqLen + pos[b]!) * row;
        wantK.set(kh.subarray(b * count * row, (b + 1) * count * row) as Float32Array, at);
        wantV.set(vh.subarray(b * count * row, (b + 1) * count * row) as Float32Array, at);
      }
      const l1 = cache.views(1, shape.maxBatch),
        l0 = cache.views(0, shape.maxBatch);
      expect(await l1.k.toArray()).toEqual(wantK);
      expect(await l1.v.toArray()).toEqual(wantV);
      expect(await l0.k.toArray()).toEqual(zero);
      expect(await l0.v.toArray()).toEqual(zero);
    } finally {
      cache.release();
    }
  });

  it('a position that leaves no room fails the stream naming the row, and writes nothing', async () => {
    const [B, Smax, nKV, D, count] = [3, 8, 2, 4, 3];
    const cacheN = B * Smax * nKV * D;
    const init = rand(cacheN, 7);
    for (const impl of IMPLS) {
      for (const [pos, pattern] of [
        [[0, 6, 1], /positions\[1\] = 6 does not leave room for 3 position\(s\) in a cache of 8 \(it must lie in \[0, 5\]\)/],
        [[2, 0, -1], /positions\[2\] = -1/],
      ] as const) {
        await d.defaultStream.synchronize();
        const s = d.newStream();
        const kc = f32(init, [B, Smax, nKV, D], s),
          vc = f32(init, [B, Smax, nKV, D], s);
        try {
          const k = f32(rand(B * count * nKV * D, 8), [B, count, nKV, D], s);
          K.kvCacheWrite(kc, vc, k, k, i32([...pos], s), { stream: s, impl });
          const err = await s.synchronize().then(
            () => undefined,
            (e: unknown) => e,
          );
          expect(err, impl).toBeInstanceOf(StreamError);
          expect((err as Error).message).toMatch(pattern);
          // Row 0 is valid in both cases and comes first: it must not have been written either.
          expect(await kc.toArray({ stream: d.defaultStream })).toEqual(init);
          expect(await vc.toArray({ stream: d.defaultStream })).toEqual(init);
        } finally {
          s.destroy();
        }
      }
    }
  });

  it('refuses wrong shapes and dtypes before enqueueing, naming the argument', () => {
    const kc = Tensor.empty(d, [2, 5, 2, 3]),
      vc = Tensor.empty(d, [2, 5, 2, 3]);
    const k = Tensor.empty(d, [2, 1, 2, 3]);
    const pos = i32([0, 1]),
      pos3 = i32([0, 1, 2]);
    const refused = (run: () => void, pattern: RegExp) => {
      let err: unknown;
      try {
        run();
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message).toMatch(pattern);
    };
    const enqueued = d.defaultStream.stats().enqueued;
    refused(() => K.kvCacheWrite(kc, vc, k, k, pos3), /expects positions of shape \[B\] = \[2\] but received \[3\]/);
    refused(() => K.kvCacheWrite(kc, vc, Tensor.empty(d, [2, 1, 1, 3]), k, pos), /expects k of shape .* but received \[2, 1, 1, 3\]/);
    refused(() => K.kvCacheWrite(kc, vc, k, Tensor.empty(d, [2, 2, 2, 3]), pos), /expects v of shape .* but received \[2, 2, 2, 3\]/);
    refused(() => K.kvCacheWrite(kc, Tensor.empty(d, [2, 6, 2, 3]), k, k, pos), /expects vCache of shape .* = \[2, 5, 2, 3\] but received \[2, 6, 2, 3\]/);
    refused(() => K.kvCacheWrite(kc.reshape([10, 6]), vc, k, k, pos), /expects kCache of shape \[B, Smax, nKV, D\] but received \[10, 6\]/);
    refused(
      () => K.kvCacheWrite(kc, vc, Tensor.empty(d, [2, 6, 2, 3]), Tensor.empty(d, [2, 6, 2, 3]), pos),
      /k holds 6 positions per row but the cache holds 5/,
    );
    refused(() => K.kvCacheWrite(kc, vc, k, k, Tensor.empty(d, [2])), /expects positions of dtype int32 but received fp32/);
    refused(() => K.kvCacheWrite(kc, vc, Tensor.empty(d, [2, 1, 2, 3], 'bf16'), k, pos), /expects k of dtype fp32 but received bf16/);
    expect(d.defaultStream.stats().enqueued, 'nothing enqueued by a refused call').toBe(enqueued);
    for (const t of [kc, vc, k, pos, pos3]) t.release();
  });
});
