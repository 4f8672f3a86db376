/**
 * The trainer side of sync verification: what each trainer rank owns of every canonical
 * tensor, as pieces (a local tensor + the affine view mapping its elements to canonical
 * indices) — the HF views (parallel/weight-sources.ts hfViews) of the sources this rank
 * owns. Over a strategy's ranks the owners' pieces cover every canonical element exactly
 * once, so fingerprints summed over the trainer group are those of the whole tensors.
 */
import type { Tensor } from '../runtime/device/device-index.js';
import { hfViews, type WeightSource } from '../parallel/weight-sources.js';
import type { AffineView } from './fingerprint.js';

export interface Piece {
  tensor: string;
  src: Tensor;
  view: AffineView;
}

export function trainerPieces(sources: readonly WeightSource[]): Piece[] {
  return sources.filter((s) => s.owner).flatMap((s) => hfViews(s).map((v) => ({ tensor: v.hf, src: s.local, view: v.view })));
}
