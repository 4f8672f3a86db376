/**
 * The tiled path of the fast permute kernel (native/kernels/fast.cc PermuteTiled: the
 * innermost output dim strided in the source, another dim the source's contiguous one —
 * the experts' layout swap and fused-expert direct writes): the fast kernel equals the
 * reference kernel and a JS gather, for sizes that are not multiples of the tile, with
 * the contiguous dim in different places and outer dims around it, in every element size.
 */
import { describe, expect, it } from 'vitest';
import { Device, Tensor, cast, permute } from '../src/runtime/device/device-index.js';

const d = Device.get(0);

/** out[i] = x[src index of i] for permute(x, dims) of a contiguous x of `shape`. */
function gather(x: Float32Array, shape: number[], dims: number[]): Float32Array {
  const strides = shape.map((_, i) => shape.slice(i + 1).reduce((a, b) => a * b, 1));
  const outShape = dims.map((k) => shape[k]!);
  const n = x.length;
  const out = new Float32Array(n);
  const idx = new Array<number>(outShape.length).fill(0);
  for (let i = 0; i < n; i++) {
    out[i] = x[dims.reduce((acc, k, j) => acc + idx[j]! * strides[k]!, 0)]!;
    for (let j = outShape.length - 1; j >= 0; j--) {
      if (++idx[j]! < outShape[j]!) break;
      idx[j] = 0;
    }
  }
  return out;
}

const cases: Array<[number[], number[]]> = [
  [
    [3, 37, 45],
    [0, 2, 1],
  ], // expert swap [E, A, B] -> [E, B, A], edges off the tile
  [
    [2, 50, 3, 40],
    [0, 3, 2, 1],
  ], // contiguous dim with an outer dim between it and the last
  [
    [64, 9],
    [1, 0],
  ], // plain 2-D transpose
  [
    [40, 33, 10],
    [2, 1, 0],
  ], // contiguous dim first, an outer dim between
];

describe('fast permute, tiled transposes', () => {
  it.each(cases)('%j by %j: fast == reference == JS gather', async (shape, dims) => {
    const n = shape.reduce((a, b) => a * b, 1);
    const host = Float32Array.from({ length: n }, (_, i) => (i % 251) - 100 + i / n);
    const x = Tensor.fromArray(d, host, shape);
    const want = gather(host, shape, dims);
    try {
      const fast = permute(x, dims, { impl: 'fast' });
      const ref = permute(x, dims, { impl: 'reference' });
      expect(fast.shape).toEqual(dims.map((k) => shape[k]));
      expect(Array.from((await fast.toArray()) as Float32Array)).toEqual(Array.from(want));
      expect(Array.from((await ref.toArray()) as Float32Array)).toEqual(Array.from(want));
      fast.release();
      ref.release();
      for (const dtype of ['bf16', 'int64', 'uint8'] as const) {
        const t = cast(x, dtype);
        const a = permute(t, dims, { impl: 'fast' }),
          b = permute(t, dims, { impl: 'reference' });
        expect(await a.toBytes(), dtype).toEqual(await b.toBytes());
        for (const y of [t, a, b]) y.release();
      }
    } finally {
      x.release();
    }
  });
});
