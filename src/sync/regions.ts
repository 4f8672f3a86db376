/**
 * The canonical form a weight sync is verified in: every HF tensor of the model (experts
 * fused: gate_up_proj [E, 2I, H], down_proj [E, H, I]) and, per engine TP rank, the region
 * of it that rank holds — the union of the regions of the rank's weight slots of it
 * (rollout/weight-slots.ts: view, dim, start, len; several for a GDN in_proj_qkv / conv1d
 * above tp 1, its q, k and v channels), or the whole tensor for the replicated ones. In placement terms
 * a region is the tensor's Shard (a dim range) or Replicate on the engine side; the slot's
 * runtime parameter plus the affine view (engineView) reads the region out of it in its
 * current layout, transposed experts included.
 */
import type { ModelConfig } from '../model/config.js';
import { paramSpecs } from '../model/params.js';
import type { RuntimeParam } from '../rollout/runtime-params.js';
import { groupSlots, slotsByHf, type SlotDescriptor } from '../rollout/weight-slots.js';
import type { AffineView, RegionFilter } from './fingerprint.js';
import { isLoraName } from './colocate-sources.js';

const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

export interface CanonicalTensor {
  name: string;
  shape: number[];
}

/** Every HF tensor of `cfg` in model order (fused experts; no LoRA adapters). */
export function canonicalTensors(cfg: ModelConfig): CanonicalTensor[] {
  return paramSpecs(cfg, { expertLayout: 'fused' })
    .filter((s) => !isLoraName(s.name))
    .map((s) => ({ name: s.name, shape: [...s.shape] }));
}

/**
 * A region of one canonical tensor: the canonical indices that pass any of `filters`
 * (each: g mod period in [start, start + len); period 0: all of it). The filters of one
 * region are disjoint (distinct slots of one rank), so its fingerprint is their sum.
 */
export interface Region {
  tensor: number;
  filters: RegionFilter[];
}

/**
 * Which region of each canonical tensor every engine TP rank holds, numbered without
 * repeats (a replicated tensor has one region; k/v replicated over TP ranks when
 * tp > kv heads share theirs). `slot[k][t]`: the region index of tensor t on TP rank k.
 */
export interface RegionTable {
  tensors: CanonicalTensor[];
  regions: Region[];
  slot: number[][];
}

export function regionTable(cfg: ModelConfig, engineTp: number): RegionTable {
  const tensors = canonicalTensors(cfg);
  const regions: Region[] = [];
  const seen = new Map<string, number>();
  const slot: number[][] = [];
  for (const slots of groupSlots(cfg, engineTp)) {
    const byHf = slotsByHf(slots);
    slot.push(
      tensors.map((t, i) => {
        const r: Region = { tensor: i, filters: byHf.get(t.name)!.map(filterOf) };
        const key = `${i}:${r.filters.map((f) => `${f.period}:${f.start}:${f.len}`).join(',')}`;
        let at = seen.get(key);
        if (at === undefined) {
          seen.set(key, (at = regions.length));
          regions.push(r);
        }
        return at;
      }),
    );
  }
  return { tensors, regions, slot };
}

/** The filter of the canonical indices one slot holds. */
function filterOf(x: SlotDescriptor): RegionFilter {
  const w = x.region;
  const inner = numel(w.view.slice(w.dim + 1));
  return w.len === w.view[w.dim] ? { period: 0, start: 0, len: 0 } : { period: w.view[w.dim]! * inner, start: w.start * inner, len: w.len * inner };
}

/**
 * The engine side: the runtime parameter of weight slot `slot` (rollout/weight-slots.ts) and
 * the affine view reading exactly its region there, in the parameter's layout (`processed`
 * swaps the experts' last two dims: an expert-swap slot).
 */
export function engineView(slot: SlotDescriptor, params: { get(n: string): RuntimeParam }, processed: boolean): { param: RuntimeParam; view: AffineView } {
  const r = slot.region;
  const param = params.get(slot.param);
  if (slot.transform === 'expert-swap') {
    const Im = r.len,
      s = r.start;
    if (r.view.length === 4) {
      // gate_up_proj seen as [E, 2, I, H]: canonical (e, j, i, h) = e·2IH + j·IH + (s + i)·H + h, j = gate / up.
      const [E, , I, H] = r.view as [number, number, number, number];
      const global = [2 * I * H, I * H, H, 1];
      const view: AffineView = processed
        ? { shape: [E, 2, Im, H], local: [H * 2 * Im, Im, 1, 2 * Im], localOffset: 0, global, globalOffset: s * H } // [E, H, 2·Im]
        : { shape: [E, 2, Im, H], local: [2 * Im * H, Im * H, H, 1], localOffset: 0, global, globalOffset: s * H }; // [E, 2·Im, H]
      return { param, view };
    }
    // down_proj [E, H, I]: canonical (e, h, i) = e·HI + h·I + s + i.
    const [E, H, I] = r.view as [number, number, number];
    const global = [H * I, I, 1];
    const view: AffineView = processed
      ? { shape: [E, H, Im], local: [Im * H, 1, H], localOffset: 0, global, globalOffset: s } // [E, Im, H]
      : { shape: [E, H, Im], local: [H * Im, Im, 1], localOffset: 0, global, globalOffset: s }; // [E, H, Im]
    return { param, view };
  }
  const inner = numel(r.view.slice(r.dim + 1)),
    outer = numel(r.view.slice(0, r.dim));
  return {
    param,
    view: {
      shape: [outer, r.len, inner],
      local: [r.len * inner, inner, 1],
      localOffset: slot.dstOffset,
      global: [r.view[r.dim]! * inner, inner, 1],
      globalOffset: r.start * inner,
    },
  };
}
