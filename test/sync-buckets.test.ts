/** Weight-sync bucket plans: every byte of every tensor lands exactly once, in order, within bounded, aligned, non-overlapping bucket ranges. */
import { describe, expect, it } from 'vitest';
import { packSmall, planBuckets } from '../src/sync/buckets.js';

describe('planBuckets', () => {
  it('covers every tensor exactly once without exceeding or overlapping a bucket (randomised)', () => {
    let seed = 12345;
    const rnd = (n: number) => (seed = (seed * 1103515245 + 12345) >>> 0) % n;
    for (let trial = 0; trial < 300; trial++) {
      const bucketBytes = 64 * (1 + rnd(64));
      const items = Array.from({ length: 1 + rnd(20) }, (_, i) => ({ name: `t${i}`, bytes: rnd(5) === 0 ? 0 : 4 * rnd(3 * bucketBytes) }));
      const buckets = planBuckets(items, bucketBytes);
      const covered = new Map<string, number>();
      buckets.forEach((b, i) => {
        expect(b.index).toBe(i);
        expect(b.bytes).toBeLessThanOrEqual(bucketBytes);
        const ranges = b.segments
          .filter((s) => s.bytes > 0)
          .map((s) => [s.bucketOffset, s.bucketOffset + s.bytes] as const)
          .sort((x, y) => x[0] - y[0]);
        for (let k = 1; k < ranges.length; k++) expect(ranges[k]![0]).toBeGreaterThanOrEqual(ranges[k - 1]![1]);
        for (const s of b.segments) {
          expect(s.bucketOffset % 64).toBe(0);
          expect(s.tensorOffset).toBe(covered.get(s.name) ?? 0);
          covered.set(s.name, s.tensorOffset + s.bytes);
        }
      });
      for (const it of items) expect(covered.get(it.name), it.name).toBe(it.bytes);
      const lastOf = new Map<string, boolean>();
      for (const b of buckets) for (const s of b.segments) lastOf.set(s.name, s.last);
      for (const it of items) expect(lastOf.get(it.name)).toBe(true);
    }
  });

  it('rejects a bucket too small to be aligned', () => {
    expect(() => planBuckets([{ name: 'a', bytes: 8 }], 16)).toThrow(/at least 64 bytes/);
  });
});

describe('packSmall', () => {
  const bucket = planBuckets(
    [
      { name: 'norm', bytes: 256 },
      { name: 'big', bytes: 4096 },
      { name: 'empty', bytes: 0 },
      { name: 'bias', bytes: 100 },
      { name: 'norm2', bytes: 512 },
    ],
    1 << 20,
  )[0]!;

  it('packs every non-empty segment at most the threshold, 64-byte aligned and without overlap; larger ones stay alone', () => {
    const p = packSmall(bucket, 1024);
    expect(p.at).toEqual([0, null, null, 64, 96]);
    expect(p.elems).toBe(96 + 128);
    const everything = packSmall(bucket, 1 << 20);
    expect(everything.at).toEqual([0, 64, null, 1088, 1120]);
    expect(everything.elems).toBe(1120 + 128);
  });

  it('packs nothing at threshold 0, or when only one segment is small (a lone segment gains nothing)', () => {
    expect(packSmall(bucket, 0)).toEqual({ at: [null, null, null, null, null], elems: 0 });
    expect(packSmall(bucket, 100)).toEqual({ at: [null, null, null, null, null], elems: 0 });
    expect(packSmall(bucket, 256).at).toEqual([0, null, null, 64, null]);
  });
});
