/**
 * Gradient-norm helpers that stay on the stream: Σ g² of a tensor as a 1x1 matmul
 * (g·gᵀ, fp32 accumulation) and in-place scaling. A strategy sums the squares of what
 * it owns, all-reduces that one number over its ranks and reads it once on the host.
 */
import { add, matmul, scaleElementsInPlace, type Stream, type Tensor } from '../runtime/device/device-index.js';

/** Σ over `tensors` of Σ g², as a [1, 1] fp32 tensor on the stream (caller releases). */
export function sumSquares(tensors: readonly Tensor[], stream: Stream): Tensor | null {
  let acc: Tensor | null = null;
  for (const g of tensors) {
    if (g.numel === 0) continue;
    const row = g.reshape([1, g.numel]);
    const s = matmul(row, row, { transB: true, stream });
    if (acc === null) acc = s;
    else {
      const next = add(acc, s, { stream });
      acc.release();
      s.release();
      acc = next;
    }
  }
  return acc;
}

/** g ← coef · g (one rounding, one op: the device scale writes each element in place). */
export function scaleInPlace(g: Tensor, coef: number, stream: Stream): void {
  if (coef === 1 || g.numel === 0) return;
  scaleElementsInPlace(g, coef, { stream });
}

/** The clip coefficient torch.nn.utils.clip_grad_norm_ applies for a total norm. */
export function clipCoefficient(totalNorm: number, maxNorm: number | null): number {
  if (maxNorm === null || !(totalNorm > maxNorm)) return 1;
  return maxNorm / (totalNorm + 1e-6);
}
