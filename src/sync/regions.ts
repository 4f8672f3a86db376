/**
 * The canonical form a weight sync is verified in: every HF tensor of the model (experts
 * fused: gate_up_proj [E, 2I, H], down_proj [E, H, I]) and, per engine TP rank, the region
 * of it that rank holds — the slice of the loader's plan (view, dim, start, len), or the
 * whole tensor for the replicated ones. In placement terms a region is the tensor's
 * Shard (a dim range) or Replicate on the engine side; a "slot" is the runtime parameter
 * plus the affine view (engineView) that reads the region out of it in its current
 * layout, transposed experts included.
 */
import { isMoeLayer, type ModelConfig } from '../model/config.js';
import { paramSpecs } from '../model/params.js';
import { hfLoadPlan, type HfEntry } from '../rollout/loader.js';
import type { RuntimeParam } from '../rollout/runtime-params.js';
import { tpShard, type TpShard } from '../rollout/tp-shard.js';
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

/** A region of one canonical tensor: canonical indices g with (g mod period) in [start, start + len) (period 0: all of it). */
export interface Region extends RegionFilter {
  tensor: number;
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
  for (let k = 0; k < engineTp; k++) {
    const plan = hfLoadPlan(cfg, tpShard(cfg, engineTp, k));
    slot.push(
      tensors.map((t, i) => {
        const w = plan.get(t.name)!.writes[0]!;
        const inner = numel(w.view.slice(w.dim + 1));
        const r: Region =
          w.len === w.view[w.dim]
            ? { tensor: i, period: 0, start: 0, len: 0 }
            : { tensor: i, period: w.view[w.dim]! * inner, start: w.start * inner, len: w.len * inner };
        const key = `${i}:${r.period}:${r.start}:${r.len}`;
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

/**
 * The engine side: the runtime parameter holding canonical tensor `name` on TP rank
 * `shard` (plan = hfLoadPlan(cfg, shard)) and the affine view reading exactly its region there, in the parameter's
 * layout (`processed` swaps the experts' last two dims).
 */
export function engineView(
  cfg: ModelConfig,
  shard: TpShard,
  plan: ReadonlyMap<string, HfEntry>,
  name: string,
  params: { get(n: string): RuntimeParam },
  processed: boolean,
): { param: RuntimeParam; view: AffineView } {
  const H = cfg.hiddenSize;
  const m = /^model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$/.exec(name);
  if (m && cfg.moe && isMoeLayer(cfg, Number(m[1]))) {
    const { numExperts: E, intermediateSize: I } = cfg.moe;
    const Im = shard.moeInterLocal,
      s = shard.moeInterStart;
    const p = `model.layers.${m[1]}.mlp.experts`;
    if (m[2] === 'gate_up_proj') {
      // Canonical (e, j, i, h) = e·2IH + j·IH + (s + i)·H + h, j = gate / up.
      const global = [2 * I * H, I * H, H, 1];
      const view: AffineView = processed
        ? { shape: [E, 2, Im, H], local: [H * 2 * Im, Im, 1, 2 * Im], localOffset: 0, global, globalOffset: s * H } // [E, H, 2·Im]
        : { shape: [E, 2, Im, H], local: [2 * Im * H, Im * H, H, 1], localOffset: 0, global, globalOffset: s * H }; // [E, 2·Im, H]
      return { param: params.get(`${p}.w13_weight`), view };
    }
    // Canonical (e, h, i) = e·HI + h·I + s + i.
    const global = [H * I, I, 1];
    const view: AffineView = processed
      ? { shape: [E, H, Im], local: [Im * H, 1, H], localOffset: 0, global, globalOffset: s } // [E, Im, H]
      : { shape: [E, H, Im], local: [H * Im, Im, 1], localOffset: 0, global, globalOffset: s }; // [E, H, Im]
    return { param: params.get(`${p}.w2_weight`), view };
  }
  const w = plan.get(name)!.writes[0]!;
  const inner = numel(w.view.slice(w.dim + 1)),
    outer = numel(w.view.slice(0, w.dim));
  return {
    param: params.get(w.param),
    view: {
      shape: [outer, w.len, inner],
      local: [w.len * inner, inner, 1],
      localOffset: w.dstOffset,
      global: [w.view[w.dim]! * inner, inner, 1],
      globalOffset: w.start * inner,
    },
  };
}
