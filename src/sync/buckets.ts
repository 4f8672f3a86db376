/**
 * Bucket plans for weight sync: tensors are packed in order into flat buckets of at
 * most `bucketBytes`; a tensor larger than a bucket is split into segments across
 * consecutive buckets, so no transfer ever needs more than one bucket of staging
 * memory. Segment offsets are 64-byte aligned inside a bucket (device alignment).
 */
import { InvalidArgumentError } from '../runtime/errors.js';

export interface BucketItem {
  name: string;
  bytes: number;
}

export interface Segment {
  name: string;
  /** Byte offset inside the tensor. */
  tensorOffset: number;
  /** Byte offset inside the bucket. */
  bucketOffset: number;
  bytes: number;
  /** This segment completes the tensor. */
  last: boolean;
}

export interface Bucket {
  index: number;
  /** Bytes used (including alignment padding). */
  bytes: number;
  segments: Segment[];
}

const ALIGN = 64;
const align = (x: number) => Math.ceil(x / ALIGN) * ALIGN;

/**
 * `keepWhole`: a tensor that fits in one bucket never straddles two (a new bucket starts
 * instead), so only tensors larger than a bucket are ever split (the receiver then never
 * needs an assembly buffer for them).
 */
export function planBuckets(items: readonly BucketItem[], bucketBytes: number, opts: { keepWhole?: boolean } = {}): Bucket[] {
  if (!Number.isSafeInteger(bucketBytes) || bucketBytes < ALIGN) {
    throw new InvalidArgumentError(`Weight-sync bucket size must be an integer of at least ${ALIGN} bytes but is ${bucketBytes}.`, { bucketBytes });
  }
  const buckets: Bucket[] = [];
  let cur: Bucket = { index: 0, bytes: 0, segments: [] };
  const flush = () => {
    if (cur.segments.length) buckets.push(cur);
    cur = { index: buckets.length, bytes: 0, segments: [] };
  };
  for (const item of items) {
    if (!Number.isSafeInteger(item.bytes) || item.bytes < 0) throw new InvalidArgumentError(`Tensor ${item.name} has an invalid size ${item.bytes}.`);
    let done = 0;
    if (opts.keepWhole && item.bytes <= bucketBytes && align(cur.bytes) + item.bytes > bucketBytes) flush();
    if (item.bytes === 0) {
      cur.segments.push({ name: item.name, tensorOffset: 0, bucketOffset: align(cur.bytes), bytes: 0, last: true });
      continue;
    }
    while (done < item.bytes) {
      let at = align(cur.bytes);
      if (at >= bucketBytes) {
        flush();
        at = 0;
      }
      const n = Math.min(item.bytes - done, bucketBytes - at);
      cur.segments.push({ name: item.name, tensorOffset: done, bucketOffset: at, bytes: n, last: done + n === item.bytes });
      cur.bytes = at + n;
      done += n;
    }
  }
  flush();
  return buckets;
}

/**
 * Which segments of `bucket` travel packed in one staging buffer (one collective for all
 * of them) instead of one collective each: every non-empty segment of at most
 * `coalesceBytes`, when at least `minCount` are (by default two: packing a lone segment only
 * adds a copy, unless the caller sends the pack whatever it holds — server-gather.ts). For a
 * small model each collective is a rendezvous of every rank that costs far more than its
 * bytes; large segments stay in place (no packing copy). A pure function of the bucket, so
 * the sender and every receiver derive the same packing with no extra message. `at[i]`:
 * the element offset of segment i in the packed buffer (16-element = 64-byte aligned), or
 * null when it is sent alone; `elems`: the packed buffer's length (0: nothing packed).
 */
export function packSmall(bucket: Bucket, coalesceBytes: number, minCount = 2): { at: Array<number | null>; elems: number } {
  const small = bucket.segments.map((s) => s.bytes > 0 && s.bytes <= coalesceBytes);
  if (small.filter(Boolean).length < minCount) return { at: bucket.segments.map(() => null), elems: 0 };
  let elems = 0;
  const at = bucket.segments.map((s, i) => {
    if (!small[i]) return null;
    const o = elems;
    elems += Math.ceil(s.bytes / ALIGN) * (ALIGN / 4);
    return o;
  });
  return { at, elems };
}
