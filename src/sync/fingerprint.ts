/**
 * Exact, partition-additive tensor fingerprints (native/kernels/fingerprint.cc). Every
 * element of a canonical tensor (the HF tensor, experts fused: gate_up_proj [E, 2I, H],
 * down_proj [E, H, I]) contributes mix64(flat canonical index, fp32 bits) and a
 * fingerprint is the sum mod 2^64. A region is read through an affine view: local strides
 * walk the memory that holds it (a trainer shard, a packed or transposed engine
 * parameter), global strides give each element's canonical index. Any split of a tensor
 * sums to the same value in any order, so trainer shards and engine slices compare
 * exactly; changing one element always changes it (mix64 is a bijection of the bits for a
 * fixed index), moving elements changes it except with probability ~2^-64.
 */
import { Tensor, type Stream } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';

/** Element i (multi-index) is local element localOffset + Σ i_d·local_d, canonical index globalOffset + Σ i_d·global_d. */
export interface AffineView {
  shape: readonly number[];
  local: readonly number[];
  localOffset: number;
  global: readonly number[];
  globalOffset: number;
}

/** Canonical indices g counted: g < limit and, with period > 0, g mod period in [start, start + len). */
export interface RegionFilter {
  period: number;
  start: number;
  len: number;
}

export const NO_FILTER: RegionFilter = { period: 0, start: 0, len: 0 };

/** Enqueues out[slot] += fingerprint of the elements of `v` in `src` that pass `filter` and `limit` (stream order, no host sync). */
export function enqueueFingerprint(
  src: Tensor,
  v: AffineView,
  out: Tensor,
  slot: number,
  stream: Stream,
  opts: { filter?: RegionFilter; limit?: number } = {},
): void {
  const r = v.shape.length;
  if (src.dtype !== 'fp32' || !src.isContiguous) throw new InvalidArgumentError(`fingerprint: the source must be a contiguous fp32 tensor but is ${src}.`);
  if (out.dtype !== 'int64' || !Number.isSafeInteger(slot) || slot < 0 || slot >= out.numel)
    throw new InvalidArgumentError(`fingerprint: slot ${slot} is not an element of the int64 output ${out}.`);
  if (v.local.length !== r || v.global.length !== r) throw new InvalidArgumentError('fingerprint: shape, local and global strides must have the same rank.');
  if (v.shape.some((d) => d === 0)) return;
  const extent = v.localOffset + v.shape.reduce((a, d, i) => a + (d - 1) * v.local[i]!, 0) + 1;
  if (v.localOffset < 0 || extent > src.numel)
    throw new InvalidArgumentError(`fingerprint: the view reaches element ${extent - 1} of ${src}, which has ${src.numel}.`);
  const f = opts.filter ?? NO_FILTER;
  src.checkLive('src');
  out.checkLive('out');
  // The sum does not depend on the order: walk the dims by decreasing local stride, so the
  // kernel's inner loop reads contiguous memory (a transposed layout becomes strided indices).
  const order = v.shape
    .map((_, i) => i)
    .filter((i) => v.shape[i]! > 1)
    .sort((a, b) => v.local[b]! - v.local[a]!);
  const pick = (xs: readonly number[]) => order.map((i) => xs[i]!);
  stream.native.fingerprint(
    src.buffer,
    src.byteOffset + v.localOffset * 4,
    pick(v.shape),
    pick(v.local),
    pick(v.global),
    v.globalOffset,
    opts.limit ?? Number.MAX_SAFE_INTEGER,
    f.period,
    f.start,
    f.len,
    out.buffer,
    out.byteOffset + slot * 8,
    0,
  );
}

/** A contiguous run of `n` elements at local offset `at` whose canonical indices start at `g`. */
export function flatView(n: number, at = 0, g = 0): AffineView {
  return { shape: [n], local: [1], localOffset: at, global: [1], globalOffset: g };
}

/** A fingerprint as 16 hex digits (unsigned). */
export function hex(x: bigint): string {
  return BigInt.asUintN(64, x).toString(16).padStart(16, '0');
}
