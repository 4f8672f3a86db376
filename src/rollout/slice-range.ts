/**
 * Slice writes from a PIECE of a source tensor, on the device, with no temporaries.
 *
 * A loader write (loader.ts SliceWrite) takes the full source seen as
 * [outer, view[dim], inner], keeps [start, start+len) of the middle dim and copies the
 * result contiguously to element `dstOffset` of the parameter: source row o contributes
 * the run [o·V + start·inner, o·V + start·inner + len·inner) (V = view[dim]·inner) to
 * dst [dstOffset + o·L, dstOffset + (o+1)·L) (L = len·inner). Here only the flat source
 * range [from, from + piece.numel) is available (a broadcast bucket segment, an fsdp2
 * chunk): the runs that intersect it are written — a partial first row, one strided read
 * for the whole rows, a partial last row — so a tensor can be streamed into the engine
 * piece by piece (each element written exactly once over all pieces) instead of being
 * assembled first. The whole tensor is the piece with from = 0.
 */
import type { Stream, Tensor } from '../runtime/device/device-index.js';
import { CopyRanges } from '../runtime/device/copy-ranges.js';
import { stridedRead, viewOf } from '../runtime/device/views.js';

/** The geometry of a slice write (a subset of loader.ts SliceWrite). */
export interface SliceGeometry {
  view: readonly number[];
  dim: number;
  start: number;
  len: number;
  dstOffset: number;
}

const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

/**
 * Writes the part of slice write `w` that lies in source elements [from, from + piece.numel)
 * into `dst` (the parameter's flat contiguous tensor). Returns the elements written.
 * Its contiguous runs go into `list` when given (the caller enqueues it, so the runs of many
 * writes are one op; a strided read of whole rows is enqueued at once, its own op), else
 * into a list of this call's own, enqueued before returning.
 */
export function writeSliceRange(dst: Tensor, piece: Tensor, from: number, w: SliceGeometry, stream: Stream, list?: CopyRanges): number {
  const inner = numel(w.view.slice(w.dim + 1));
  const outer = numel(w.view.slice(0, w.dim));
  const V = w.view[w.dim]! * inner;
  const L = w.len * inner;
  const s0 = w.start * inner;
  const a = from,
    b = from + piece.numel;
  if (L === 0 || b <= a) return 0;
  // Rows whose run [o·V + s0, o·V + s0 + L) meets [a, b).
  const first = Math.max(0, Math.ceil((a - s0 - L + 1) / V));
  const last = Math.min(outer - 1, Math.floor((b - 1 - s0) / V));
  if (last < first) return 0;
  // Ranges and views address a contiguous tensor by element whatever its shape; a
  // non-contiguous one gets reshape()'s error. (A flat reshape per call was two tensor
  // objects per segment of every sync, a visible share of an engine rank's receive.)
  const flatDst = dst.isContiguous ? dst : dst.reshape([dst.numel]);
  const flatSrc = piece.isContiguous ? piece : piece.reshape([piece.numel]);
  const runs = list ?? new CopyRanges();
  let written = 0;
  const part = (o: number) => {
    const lo = Math.max(a, o * V + s0),
      hi = Math.min(b, o * V + s0 + L);
    if (hi <= lo) return;
    runs.add(flatDst, w.dstOffset + o * L + (lo - o * V - s0), flatSrc, lo - a, hi - lo);
    written += hi - lo;
  };
  const whole = (o: number) => o * V + s0 >= a && o * V + s0 + L <= b;
  let oa = first,
    ob = last;
  if (!whole(oa)) part(oa++);
  if (ob >= oa && !whole(ob)) part(ob--);
  if (ob >= oa) {
    const rows = ob - oa + 1;
    if (rows === 1 || V === L) {
      // Contiguous in both: one copy.
      runs.add(flatDst, w.dstOffset + oa * L, flatSrc, oa * V + s0 - a, rows * L);
    } else {
      stridedRead(viewOf(flatDst, [rows * L], w.dstOffset + oa * L), flatSrc, [rows, L], [V, 1], oa * V + s0 - a, stream);
    }
    written += rows * L;
  }
  if (!list) runs.enqueue(stream);
  return written;
}

/**
 * When source elements [from, from + count) land in ONE contiguous region of the
 * destination under slice write `w` (whole rows, or inside one row's run), the element
 * offset of that region in the parameter; else null. Lets a receiver have the bytes
 * delivered straight into the parameter instead of into a staging buffer.
 */
export function contiguousTarget(w: SliceGeometry, from: number, count: number): number | null {
  const inner = numel(w.view.slice(w.dim + 1));
  const outer = numel(w.view.slice(0, w.dim));
  const V = w.view[w.dim]! * inner,
    L = w.len * inner,
    s0 = w.start * inner;
  if (count <= 0 || from < 0 || from + count > outer * V) return null;
  if (V === L) return w.dstOffset + from;
  const o = Math.floor(from / V);
  if (from < o * V + s0 || from + count > o * V + s0 + L) return null;
  return w.dstOffset + o * L + (from - o * V - s0);
}
