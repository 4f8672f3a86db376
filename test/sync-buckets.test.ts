/** Weight-sync bucket plans: every byte of every tensor lands exactly once, in order, within bounded, aligned, non-overlapping bucket ranges. */
import { describe, expect, it } from 'vitest';
import { planBuckets } from '../src/sync/buckets.js';

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
