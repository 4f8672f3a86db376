/**
 * The weight-sync planner: sources × slots → steps. The trainer side publishes weight
 * sources (parallel/weight-sources.ts: placement, HF mapping), the engine side weight
 * slots (rollout/weight-slots.ts: region, transform, layout state); planSync() decides per
 * source how its pieces reach the engine, for both sync modes, from data alone (no
 * strategy or engine code is asked per name):
 *
 * - local: the engine's TP size equals the source's parts and every part's HF views are
 *   exactly the slots of the engine rank of the same index (Megatron trainer tp == engine
 *   tp, or an fsdp2 row chunk that is an engine TP slice): the piece is read straight into
 *   the engine's parameters (`local`: per parameter, the slice writes over the flat piece),
 *   no collective, no re-cut;
 * - colocate only: whole (one part: the HF tensors of the piece written through the slots),
 *   experts (stacked experts over ep: one all-gather per local expert, written per expert
 *   through the fused tensor's expert-swap slot), stream (Shard(0) identity: dim-0 chunks
 *   all-gathered in bucket pieces, straight into the parameter when the slot is the whole
 *   tensor), gather (all parts all-gathered, re-cut into HF tensors);
 * - server only: ranges (every view of every part is a flat range of its piece: loaded as
 *   HF ranges, delivered in place where contiguous), assemble (received whole, re-cut).
 *
 * Every rank of a placement's communicator gets the same kind (the verdict reads only
 * descriptors every rank has), so the collectives of a colocated sync match.
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import { hfViews, type AffineView, type HfView, type SourceDescriptor } from '../parallel/weight-sources.js';
import type { SlotDescriptor } from '../rollout/weight-slots.js';
import type { SliceGeometry } from '../rollout/slice-range.js';
import { localGeometry, sameRuns } from './slice-match.js';

export type StepKind = 'local' | 'whole' | 'experts' | 'stream' | 'gather' | 'ranges' | 'assemble';

export interface SyncStep {
  kind: StepKind;
  /** The source (its descriptor; the caller holds its tensor and communicator by index). */
  source: SourceDescriptor;
  /** This engine rank's slots of the source's HF tensors (empty on a rank without an engine). */
  slots: SlotDescriptor[];
  /** local: the piece's HF views matched to this rank's slots, and per runtime parameter the slice writes over the flat piece. */
  local?: { views: Array<{ view: AffineView; slot: SlotDescriptor }>; params: Array<{ param: string; geometry: SliceGeometry[] }> };
  /** ranges: per part, its HF views (each a flat range of the piece). */
  ranges?: HfView[][];
}

export interface SlotSet {
  /** The engine's TP size. */
  tpSize: number;
  /** Colocated: the slots of every rank of the engine's TP group (by TP rank; plain data, rollout/weight-slots.ts groupSlots). */
  group?: readonly SlotDescriptor[][];
  /** This rank's engine: its TP rank and the slots it writes through (engine.weightSlots()); absent on trainer-only ranks. */
  mine?: { tpRank: number; slots: readonly SlotDescriptor[] };
}

const byHf = (slots: readonly SlotDescriptor[]) => {
  const m = new Map<string, SlotDescriptor[]>();
  for (const s of slots) m.set(s.hf, [...(m.get(s.hf) ?? []), s]);
  return m;
};

/** Each HF view of part `part` paired with the one slot of `slots` holding exactly its runs, or null. */
function matchViews(views: readonly HfView[], slots: Map<string, SlotDescriptor[]>): Array<{ view: AffineView; slot: SlotDescriptor }> | null {
  const out: Array<{ view: AffineView; slot: SlotDescriptor }> = [];
  for (const v of views) {
    const ss = slots.get(v.hf);
    if (!ss || ss.length !== 1 || ss[0]!.transform === 'expert-swap' || !sameRuns(v.view, geometryOf(ss[0]!))) return null;
    out.push({ view: v.view, slot: ss[0]! });
  }
  return out;
}

const geometryOf = (s: SlotDescriptor): SliceGeometry => ({
  view: s.region.view,
  dim: s.region.dim,
  start: s.region.start,
  len: s.region.len,
  dstOffset: s.dstOffset,
});

/**
 * Every HF tensor of the source has a view in `vs` (a part's views can be empty: fsdp2's
 * dim-0 chunks of a one-row tensor leave the second rank nothing); a part that holds none
 * of a tensor cannot be the engine rank's slice of it, however its other views match.
 */
const covers = (vs: readonly HfView[], hfs: ReadonlySet<string>) => [...hfs].every((hf) => vs.some((v) => v.hf === hf));

/** sources × slots → one step per source, in source order (see the file header). */
export function planSync(sources: readonly SourceDescriptor[], slots: SlotSet, mode: 'colocate' | 'server'): SyncStep[] {
  const tp = slots.tpSize;
  if (mode === 'colocate' && slots.group?.length !== tp) {
    throw new InvalidArgumentError(
      `planSync(): a colocated plan needs the slots of all ${tp} engine TP ranks but has ${slots.group?.length ?? 0}. HINT: pass group: groupSlots(cfg, tp).`,
    );
  }
  const group = (slots.group ?? []).map(byHf);
  const mine = slots.mine ? byHf(slots.mine.slots) : null;
  return sources.map((s) => {
    const views = Array.from({ length: s.parts }, (_, p) => hfViews(s, p));
    const hfs = new Set(views.flat().map((v) => v.hf));
    const own = mine ? [...hfs].flatMap((hf) => mine.get(hf) ?? []) : [];
    const step: SyncStep = { kind: 'gather', source: s, slots: own };
    const sameTp = tp === s.parts && s.map.kind !== 'experts';
    if (mode === 'colocate') {
      // The engine rank of the piece's index is this rank (colocated: the same ranks in the same order).
      if (sameTp && slots.mine?.tpRank === s.part && views.every((vs, p) => covers(vs, hfs) && matchViews(vs, group[p]!))) {
        step.kind = 'local';
        step.local = { views: matchViews(views[s.part]!, group[s.part]!)!, params: [] };
      } else if (s.parts === 1) step.kind = 'whole';
      else if (s.map.kind === 'experts') step.kind = 'experts';
      else if (s.placement.kind === 'shard' && s.placement.dim === 0 && s.map.kind === 'identity') step.kind = 'stream';
      return step;
    }
    if (views.every((vs) => vs.every((v) => v.view.shape.length === 1 && v.view.local[0] === 1 && v.view.global[0] === 1))) {
      step.kind = 'ranges';
      step.ranges = views;
      return step;
    }
    if (sameTp && mine && covers(views[slots.mine!.tpRank]!, hfs)) {
      const k = slots.mine!.tpRank;
      const params = localGeometry(views[k]!, (hf) => (mine.get(hf) ?? []).map((x) => ({ ...geometryOf(x), param: x.param })), s.localNumel);
      if (params) {
        step.kind = 'local';
        step.local = { views: matchViews(views[k]!, mine) ?? [], params };
        return step;
      }
    }
    step.kind = 'assemble';
    return step;
  });
}
