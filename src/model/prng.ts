/**
 * Seeded pseudo-random numbers for parameter init, synthetic data and fuzzing.
 *
 * Invariant: the same seed gives the same sequence on every platform and Node
 * version (pure 32-bit integer arithmetic, no Math.random), so checkpoints and
 * batches made from a seed are reproducible bit for bit.
 */

/** A 32-bit generator (mulberry32). Not cryptographic. */
export class Prng {
  private state: number;

  constructor(seed: number) {
    this.state = mixSeed(seed);
  }

  /** Uniform 32-bit unsigned integer. */
  nextU32(): number {
    this.state = (this.state + 0x6d2b79f5) | 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.nextU32() / 4294967296;
  }

  /** Uniform integer in [lo, hi] (inclusive). */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }

  /** Standard normal (Box-Muller; one value per call, the pair's twin discarded for simplicity). */
  normal(): number {
    let u = this.next();
    while (u === 0) u = this.next();
    const v = this.next();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }

  /** One element of `items`, uniformly. */
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)];
  }
}

/** Folds any finite number (negative, fractional, > 2^32) into a well-mixed 32-bit seed. */
export function mixSeed(seed: number): number {
  let h = 0x9e3779b9 ^ (Math.floor(seed) >>> 0) ^ (Math.floor(seed / 4294967296) >>> 0);
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** FNV-1a hash of a string, for deriving per-name streams from one seed. */
export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}
