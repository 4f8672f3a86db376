/**
 * Gradient-norm helpers that stay on the stream: Σ g² of a list of tensors as ONE op
 * (K.sumSquares: per tensor the 1x1 matmul g·gᵀ, fp32 accumulation, then fp32 adds in list
 * order) and in-place scaling. A strategy sums the squares of what it owns, all-reduces that
 * one number over its ranks and reads it once on the host.
 */
import { scaleElementsInPlace, type Stream, type Tensor } from '../runtime/device/device-index.js';
import { sumSquares as sumSquaresOp } from '../model/kernels/sum-squares.js';

/** Σ over `tensors` of Σ g², as a [1, 1] fp32 tensor on the stream (caller releases); null when no tensor has elements. */
export function sumSquares(tensors: readonly Tensor[], stream: Stream): Tensor | null {
  if (!tensors.some((g) => g.numel > 0)) return null;
  return sumSquaresOp(tensors, { stream });
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
