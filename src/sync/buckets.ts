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
