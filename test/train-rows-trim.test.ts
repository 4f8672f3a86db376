/**
 * The host side of the padding trim: a rank's width (train/rows.ts trimmedWidth), its rows at
 * that width (localRows, localTokens), the router aux loss's token slots (lossPositions), the
 * widening of its log-probs back to the global width, and the LoRA dropout windows of trimmed
 * rows (model/lora-ops.ts), which must be the untrimmed run's masks at the same tokens.
 */
import { describe, expect, it } from 'vitest';
import { localRows, localTokens, lossPositions, narrowRows, trimmedWidth, trimsExactly, widenRows } from '../src/train/rows.js';
import { dropoutMaskWindow } from '../src/model/lora-ops.js';
import type { TrainBatch } from '../src/train/strategy.js';

const I = -100;
/** Rows of width 5 with targets at the given positions; inputIds = 100·row + position. */
function batchOf(targetsAt: number[][], S = 5): TrainBatch {
  const B = targetsAt.length;
  const inputIds = Int32Array.from({ length: B * S }, (_, i) => 100 * Math.floor(i / S) + (i % S));
  const targets = new Int32Array(B * S).fill(I);
  targetsAt.forEach((ts, r) => ts.forEach((t) => (targets[r * S + t] = 7)));
  return { inputIds, targets, batch: B, seqLen: S };
}

describe('trimmedWidth / localRows', () => {
  it('a rank keeps 1 + the last target position over its rows; a rank without targets keeps 1', () => {
    const b = batchOf([[0, 1], [3], [], []]);
    expect(trimmedWidth(b.targets, 4, 5)).toBe(4);
    expect(trimmedWidth(b.targets.subarray(10), 2, 5)).toBe(1);
    const [r0, r1] = [localRows(b, 2, 0), localRows(b, 2, 1)];
    expect([r0.seqLen, r0.stride, r0.row0, r0.rows]).toEqual([4, 5, 0, 2]);
    expect(Array.from(r0.inputIds)).toEqual([0, 1, 2, 3, 100, 101, 102, 103]);
    expect(Array.from(r0.targets)).toEqual([7, 7, I, I, I, I, I, 7]);
    expect([r1.seqLen, Array.from(r1.inputIds), Array.from(r1.targets)]).toEqual([1, [200, 300], [I, I]]);
  });

  it('a padding mask keeps its last token (the router aux loss counts it); trimPadding false keeps seqLen', () => {
    const b = { ...batchOf([[0], [1]]), attentionMask: Int32Array.from([1, 1, 1, 0, 0, 1, 1, 0, 0, 0]) };
    const r = localRows(b, 1, 0);
    expect(r.seqLen).toBe(3);
    expect(Array.from(r.attentionMask!)).toEqual([1, 1, 1, 1, 1, 0]);
    expect(localRows({ ...b, trimPadding: false }, 1, 0).seqLen).toBe(5);
    expect(() => localRows({ ...b, trimPadding: 'no' as never }, 1, 0)).toThrow(/trimPadding must be a boolean/);
  });

  it('no trim for a model whose values depend on the width: dynamic rope follows the sequence length', () => {
    expect(trimsExactly({ rope: { type: 'dynamic' } } as never)).toBe(false);
    for (const type of ['default', 'linear', 'yarn', 'llama3']) expect(trimsExactly({ rope: { type } } as never)).toBe(true);
    const b = batchOf([[0], [1]]);
    expect(localRows(b, 1, 0).seqLen).toBe(2);
    expect(localRows(b, 1, 0, false).seqLen).toBe(5);
  });

  it('localTokens reads a global [B·S] array at the rank width; widenRows puts it back, zero past the width', () => {
    const b = batchOf([[], [2], [0], []]);
    const g = Float32Array.from({ length: 20 }, (_, i) => i);
    const r1 = localRows(b, 2, 1);
    expect(r1.seqLen).toBe(1);
    expect(Array.from(localTokens(r1, g))).toEqual([10, 15]);
    const r0 = localRows(b, 2, 0);
    expect(Array.from(localTokens(r0, g))).toEqual([0, 1, 2, 5, 6, 7]);
    expect(Array.from(widenRows(Float32Array.from([1, 2, 3, 4, 5, 6]), 2, 3, 5))).toEqual([1, 2, 3, 0, 0, 4, 5, 6, 0, 0]);
    expect(narrowRows(g, 4, 5, 5)).toBe(g);
  });

  it("lossPositions: each row's positions up to its last target, the same trimmed or not", () => {
    const b = batchOf([[1], [], [3]]);
    expect(Array.from(lossPositions(b.targets, 3, 5))).toEqual([1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0]);
    const r = localRows(b, 1, 0);
    const full = lossPositions(b.targets, 3, 5);
    expect(Array.from(lossPositions(r.targets, 3, r.seqLen))).toEqual(Array.from(narrowRows(full, 3, 5, r.seqLen)));
  });
});

describe('dropoutMaskWindow of trimmed rows', () => {
  it("is the untrimmed window's mask at the kept tokens (row-parallel columns too)", () => {
    const [B, S, s, cols] = [4, 6, 4, 8];
    const total = { rows: B * S, cols };
    for (const [col0, w] of [
      [0, cols],
      [4, 4],
    ] as const) {
      // Rows 2 and 3 of the batch (a dp rank), untrimmed: token rows [2·S, 4·S).
      const full = dropoutMaskWindow(5, 'layers.0.q', 0.5, total, { row0: 2 * S, rows: 2 * S, col0, cols: w });
      const trimmed = dropoutMaskWindow(5, 'layers.0.q', 0.5, total, { row0: 2 * S, rows: 2 * s, col0, cols: w, seq: { global: S, local: s } });
      expect(Array.from(trimmed)).toEqual(Array.from(narrowRows(full, 2, S * w, s * w)));
      expect(trimmed.some((x) => x === 0) && trimmed.some((x) => x !== 0)).toBe(true);
    }
  });
});
