/**
 * Whether a piece the trainer holds IS the engine's slice: an HF view of the piece
 * (parallel/weight-sources.ts hfViews) and an engine slice write (loader.ts SliceWrite)
 * compared as runs of HF indices. When every view of a piece matches, the piece is read
 * straight into the engine's local tensors (the geometry below), with no collective and no
 * re-cut — Megatron TP shards into an engine of the same tp, in both sync modes.
 */
import type { AffineView, HfView } from '../parallel/weight-sources.js';
import { numelOf } from '../parallel/weight-sources.js';
import type { SliceGeometry } from '../rollout/slice-range.js';

/** `count` runs of `len` HF elements, `period` apart, from `start` (count -1: not a run pattern). */
type Runs = [count: number, period: number, start: number, len: number];

function viewRuns(v: AffineView): Runs {
  if (v.shape.length === 1 && v.global[0] === 1) return [1, 0, v.globalOffset, v.shape[0]!];
  if (v.shape.length === 2 && v.global[1] === 1) {
    const [a, b] = v.shape as [number, number];
    return a === 1 || b === v.global[0] ? [1, 0, v.globalOffset, a * b] : [a, v.global[0]!, v.globalOffset, b];
  }
  return [-1, 0, 0, 0];
}

/** A loader slice write's runs: outer rows of view[dim]·inner elements, keeping [start, start + len). */
function sliceRuns(r: SliceGeometry): Runs {
  const inner = numelOf(r.view.slice(r.dim + 1)),
    outer = numelOf(r.view.slice(0, r.dim)),
    V = r.view[r.dim]! * inner;
  return outer === 1 || r.len * inner === V ? [1, 0, r.start * inner, outer * r.len * inner] : [outer, V, r.start * inner, r.len * inner];
}

export function sameRuns(v: AffineView, w: SliceGeometry | undefined): boolean {
  if (!w) return false;
  const a = viewRuns(v),
    b = sliceRuns(w);
  return a[0] > 0 && a.every((x, i) => x === b[i]);
}

/**
 * Views of a piece of `partNumel` elements against the engine's slice writes of each HF
 * tensor (`writesOf`): per runtime parameter, the slice writes that take the piece into it
 * (SliceGeometry over the flat piece); null when a view is not exactly one engine slice.
 */
export function localGeometry(
  views: readonly HfView[],
  writesOf: (hf: string) => ReadonlyArray<SliceGeometry & { param: string }>,
  partNumel: number,
): Array<{ param: string; geometry: SliceGeometry[] }> | null {
  const out = new Map<string, SliceGeometry[]>();
  for (const { hf, view: v } of views) {
    const ws = writesOf(hf);
    if (ws.length !== 1 || !sameRuns(v, ws[0])) return null;
    const w = ws[0]!;
    let g: SliceGeometry;
    if (v.shape.length === 1) g = { view: [partNumel], dim: 0, start: v.localOffset, len: v.shape[0]!, dstOffset: w.dstOffset };
    else {
      const row = v.local[0]!;
      if (v.local[1] !== 1 || v.shape[0]! * row !== partNumel || v.localOffset + v.shape[1]! > row) return null;
      g = { view: [v.shape[0]!, row], dim: 1, start: v.localOffset, len: v.shape[1]!, dstOffset: w.dstOffset };
    }
    out.set(w.param, [...(out.get(w.param) ?? []), g]);
  }
  return [...out].map(([param, geometry]) => ({ param, geometry }));
}
