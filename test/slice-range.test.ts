/**
 * Streaming slice writes (src/rollout/slice-range.ts): a source delivered in arbitrary
 * flat pieces and written with writeSliceRange equals the host reference of the whole
 * slice (every element once, nothing outside the written region touched), for the
 * loader's geometries (row slices, dim-1 column slices, the fused-expert [E, 2, I, H]
 * dim-2 slice, Megatron qkv de-interleave). contiguousTarget agrees with the reference on
 * when a piece lands in one contiguous region, and where.
 */
import { describe, expect, it } from 'vitest';
import { Device, Tensor } from '../src/runtime/device/device-index.js';
import { contiguousTarget, writeSliceRange, type SliceGeometry } from '../src/rollout/slice-range.js';

const device = Device.get(0);
const stream = device.defaultStream;
const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

/** Host reference: dst index of every source element the write keeps (-1 when not kept). */
function referenceMap(w: SliceGeometry): Int32Array {
  const inner = numel(w.view.slice(w.dim + 1));
  const outer = numel(w.view.slice(0, w.dim));
  const map = new Int32Array(numel(w.view)).fill(-1);
  let d = w.dstOffset;
  for (let o = 0; o < outer; o++)
    for (let i = w.start; i < w.start + w.len; i++) for (let k = 0; k < inner; k++) map[(o * w.view[w.dim]! + i) * inner + k] = d++;
  return map;
}

/** Deterministic cut points of [0, n) into pieces of varied sizes. */
function cuts(n: number, seed: number): number[] {
  const out = [0];
  let x = seed;
  while (out[out.length - 1]! < n) {
    x = (x * 1103515245 + 12345) % 2147483648;
    out.push(Math.min(n, out[out.length - 1]! + 1 + (x % Math.max(1, Math.floor(n / 3)))));
  }
  return out;
}

const cases: Array<[string, SliceGeometry]> = [
  ['whole tensor', { view: [12, 5], dim: 0, start: 0, len: 12, dstOffset: 3 }],
  ['row slice (q_proj of tp rank 1)', { view: [12, 5], dim: 0, start: 4, len: 6, dstOffset: 7 }],
  ['column slice (o_proj of tp rank 1)', { view: [6, 10], dim: 1, start: 5, len: 5, dstOffset: 0 }],
  ['fused gate_up [E, 2, I, H] dim 2', { view: [3, 2, 8, 4], dim: 2, start: 2, len: 4, dstOffset: 0 }],
  ['qkv de-interleave: k of each group', { view: [2, 4 * 3], dim: 1, start: 6, len: 3, dstOffset: 12 }],
];

describe('writeSliceRange / contiguousTarget', () => {
  it.each(cases)('%s: pieces written one by one equal the reference slice', async (_, w) => {
    const n = numel(w.view);
    const src = Float32Array.from({ length: n }, (_, i) => i + 1);
    const map = referenceMap(w);
    const dstLen = Math.max(...map) + 1 + 4;
    const want = new Float32Array(dstLen);
    map.forEach((d, i) => {
      if (d >= 0) want[d] = src[i]!;
    });
    for (const seed of [1, 7, 99]) {
      const dst = Tensor.zeros(device, [dstLen], 'fp32', { stream });
      const c = cuts(n, seed);
      let written = 0;
      try {
        for (let j = 0; j + 1 < c.length; j++) {
          const piece = Tensor.fromArray(device, src.slice(c[j]!, c[j + 1]!), [c[j + 1]! - c[j]!], { stream });
          written += writeSliceRange(dst, piece, c[j]!, w, stream);
          piece.release();
        }
        const got = (await dst.toArray({ stream })) as Float32Array;
        expect(Array.from(got), `seed ${seed}`).toEqual(Array.from(want));
        expect(written).toBe(map.filter((d) => d >= 0).length);
      } finally {
        dst.release();
      }
    }
  });

  it.each(cases)('%s: contiguousTarget matches the reference map', (_, w) => {
    const map = referenceMap(w);
    const n = map.length;
    for (let from = 0; from < n; from += 1) {
      for (const count of [1, 2, 5, 9, n - from]) {
        if (count <= 0 || from + count > n) continue;
        const d = Array.from(map.slice(from, from + count));
        const contiguous = d.every((x, i) => x >= 0 && x === d[0]! + i);
        expect(contiguousTarget(w, from, count), `from ${from} count ${count}`).toBe(contiguous ? d[0]! : null);
      }
    }
  });
});
