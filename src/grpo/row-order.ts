/**
 * Length-sorted rows for the policy update. Each data-parallel rank trims its rows to the
 * width they need (train/rows.ts localRows), so rows of similar length on the same rank save
 * the most: the rows of each mini-batch are sorted by that width before the split. Only the
 * order inside a mini-batch changes (which rows share an optimizer step does not), and the
 * objective normalises over the mini-batch, so the token-mean loss and its gradient are the
 * same up to fp32 summation order.
 */
import { targetWidths } from '../train/rows.js';
import type { TrainBatch } from '../train/strategy.js';

/** Per row: 1 + its last target position (0 when it has none), the width it needs. */
export function rowWidths(b: TrainBatch): Int32Array {
  return targetWidths(b.targets, b.batch, b.seqLen);
}

/** The rows in the new order (new row i is old row order[i]): each range sorted by width, ascending, stable. */
export function lengthOrder(b: TrainBatch, ranges: ReadonlyArray<readonly [number, number]>): Int32Array {
  const w = rowWidths(b);
  const order = Int32Array.from({ length: b.batch }, (_, i) => i);
  for (const [r0, r1] of ranges)
    order.set(
      Array.from(order.subarray(r0, r1)).sort((x, y) => w[x]! - w[y]! || x - y),
      r0,
    );
  return order;
}

/** A row-major [rows·width] array with its rows in `order` (a copy). */
export function permuteRows<T extends Int32Array | Float32Array>(a: T, width: number, order: Int32Array): T {
  const out = new (a.constructor as new (n: number) => T)(a.length);
  order.forEach((src, i) => out.set(a.subarray(src * width, (src + 1) * width), i * width));
  return out;
}

/** The batch with its rows in `order` (a copy). */
export function permuteBatch(b: TrainBatch, order: Int32Array): TrainBatch {
  const S = b.seqLen;
  return {
    ...b,
    inputIds: permuteRows(b.inputIds, S, order),
    targets: permuteRows(b.targets, S, order),
    ...(b.attentionMask ? { attentionMask: permuteRows(b.attentionMask, S, order) } : {}),
  };
}

/** Token slots of a batch: the rows' widths (`needed`), once each block of `rowsPerRank` rows is trimmed to its widest (`trimmed`), untrimmed (`full`). */
export interface TokenSlots {
  needed: number;
  trimmed: number;
  full: number;
}

export function tokenSlots(b: TrainBatch, rowsPerRank: number): TokenSlots {
  const w = rowWidths(b);
  const out = { needed: 0, trimmed: 0, full: b.batch * b.seqLen };
  for (let r0 = 0; r0 < b.batch; r0 += rowsPerRank) {
    let width = 1;
    for (let r = r0; r < r0 + rowsPerRank; r++) width = Math.max(width, w[r]!);
    out.trimmed += width * rowsPerRank;
  }
  for (const x of w) out.needed += x;
  return out;
}

/** The share of the computed token slots that are padding (positions past their row's last target), untrimmed and trimmed. */
export function paddedFraction(s: TokenSlots): { untrimmed: number; trimmed: number } {
  return { untrimmed: 1 - s.needed / s.full, trimmed: 1 - s.needed / s.trimmed };
}
