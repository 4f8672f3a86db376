/**
 * The weight-slot contract: what one engine TP rank holds, published as data. Per HF
 * tensor of the model (experts fused: gate_up_proj [E, 2I, H], down_proj [E, H, I]) and
 * runtime parameter it fills, a slot says:
 *
 * - the region of the HF tensor this rank holds: the HF tensor seen as `region.view`,
 *   elements [start, start + len) of dim `region.dim` (all of the other dims) — a Shard
 *   of one dim over the TP group with torch.chunk semantics for heads and intermediate
 *   columns, the whole tensor for the replicated ones; `replicas` TP ranks hold the same
 *   region (k / v when tp > kv heads, every replicated tensor);
 * - where it goes: `param` at element `dstOffset` of the PREPROCESSED layout, contiguous
 *   (the loader's slice write, loader.ts SliceWrite), filling the parameter's `parts`;
 * - the transform from HF to runtime: 'identity' (the region is the whole parameter),
 *   'qkv-pack' / 'gate-up-pack' (rows of a packed q ‖ k ‖ v or gate ‖ up parameter: the
 *   attention's qkv_proj, above tp 1 a GDN in_proj_qkv / conv1d too, whose HF tensor then
 *   has three slots on a rank, one per q / k / v region) or
 *   'expert-swap' (the fused experts, whose processed layout swaps the last two dims);
 * - `layout`: the layouts the slice write addresses — 'processed' when processing is the
 *   identity for the parameter (a direct write is the same slice), 'preprocessed' when
 *   only the loader's layout is (expert-swap) — and `state`, the parameter's LayoutState.
 *
 * Slots are built from the loader's plan (hfLoadPlan), the one place the TP slicing is
 * written; a SlotDescriptor is plain JSON, so a planner on any rank reads it.
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import { paramSpecs } from '../model/params.js';
import type { ModelConfig } from '../model/config.js';
import { hfLoadPlan, type HfEntry } from './loader.js';
import type { LayoutState, RuntimeParams, WriteLayout } from './runtime-params.js';
import { tpShard, type TpShard } from './tp-shard.js';
import type { SliceGeometry } from './slice-range.js';

export type SlotTransform = 'identity' | 'qkv-pack' | 'gate-up-pack' | 'expert-swap';

/** The HF tensor seen as `view`: elements [start, start + len) of dim `dim`, all of the others. */
export interface SlotRegion {
  view: number[];
  dim: number;
  start: number;
  len: number;
}

export interface SlotDescriptor {
  /** The HF tensor (experts fused) and its full shape. */
  hf: string;
  shape: number[];
  /** The runtime parameter written and the parts of it the slot fills. */
  param: string;
  parts: string[];
  /** The engine TP group and this rank in it. */
  tpSize: number;
  tpRank: number;
  region: SlotRegion;
  /** TP ranks holding this same region (1: a true shard; tpSize: replicated). */
  replicas: number;
  /** Element offset of the region in the parameter's preprocessed layout. */
  dstOffset: number;
  transform: SlotTransform;
  /** 'processed': the slice write holds in both layouts; 'preprocessed': in the loader's only (expert-swap). */
  layout: WriteLayout;
  /** The parameter's state when the slots were published ('dropped' for slots made without an engine). */
  state: LayoutState;
}

const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

const tensorsOf = new WeakMap<ModelConfig, readonly string[]>();

/** HF tensors of `cfg` with slots, in model order (fused experts; LoRA adapters are not model weights). Made once per config object. */
export function slotTensors(cfg: ModelConfig): readonly string[] {
  let names = tensorsOf.get(cfg);
  if (!names) {
    names = Object.freeze(
      paramSpecs(cfg, { expertLayout: 'fused' })
        .map((s) => s.name)
        .filter((n) => !/\.lora_[AB](\.|$)/.test(n)),
    );
    tensorsOf.set(cfg, names);
  }
  return names;
}

function transformOf(param: string, parts: readonly string[], swap: boolean): SlotTransform {
  if (swap) return 'expert-swap';
  if (param.endsWith('.qkv_proj.weight')) return 'qkv-pack';
  // A Qwen3.5 GDN in_proj_qkv / conv1d above tp 1: the rank's q, k and v channels packed (gdn-shard.ts).
  if (/\.linear_attn\.(in_proj_qkv|conv1d)\.weight$/.test(param) && parts.length === 1 && ['q', 'k', 'v'].includes(parts[0]!)) return 'qkv-pack';
  if (param.endsWith('.gate_up_proj.weight')) return 'gate-up-pack';
  if (parts.length === 1 && parts[0] === 'all') return 'identity';
  throw new InvalidArgumentError(`Weight slots: runtime parameter ${param} (parts ${parts.join(', ')}) has no known transform.`, { parameter: param });
}

/**
 * The slots of one HF tensor from its loader plan entry: one per slice write (per runtime
 * parameter; per q / k / v region for a GDN in_proj_qkv / conv1d above tp 1).
 */
export function slotsOfEntry(cfg: ModelConfig, shard: TpShard, hf: string, entry: HfEntry, params?: RuntimeParams): SlotDescriptor[] {
  return entry.writes.map((w) => {
    const swap = /\.mlp\.experts\.w(13|2)_weight$/.test(w.param);
    const whole = w.start === 0 && w.len === w.view[w.dim];
    const kv = /\.self_attn\.[kv]_proj\.weight$/.test(hf);
    const replicas = whole ? shard.tpSize : kv && shard.tpSize > cfg.numKvHeads ? shard.tpSize / cfg.numKvHeads : 1;
    return {
      hf,
      shape: [...entry.shape],
      param: w.param,
      parts: [...w.parts],
      tpSize: shard.tpSize,
      tpRank: shard.tpRank,
      region: { view: [...w.view], dim: w.dim, start: w.start, len: w.len },
      replicas,
      dstOffset: w.dstOffset,
      transform: transformOf(w.param, w.parts, swap),
      layout: swap ? 'preprocessed' : 'processed',
      state: params?.get(w.param).state ?? 'dropped',
    };
  });
}

/** Every slot of TP rank `shard` (the engine's own when `params` is its runtime parameters). */
export function weightSlots(
  cfg: ModelConfig,
  shard: TpShard,
  params?: RuntimeParams,
  plan: ReadonlyMap<string, HfEntry> = hfLoadPlan(cfg, shard),
): SlotDescriptor[] {
  return slotTensors(cfg).flatMap((hf) => {
    const entry = plan.get(hf);
    if (!entry) throw new InvalidArgumentError(`Weight slots: the loader has no plan for ${hf}.`, { tensor: hf });
    return slotsOfEntry(cfg, shard, hf, entry, params);
  });
}

/** The slots of every rank of an engine TP group of `tpSize` (what a planner compares sources against). */
export function groupSlots(cfg: ModelConfig, tpSize: number): SlotDescriptor[][] {
  return Array.from({ length: tpSize }, (_, k) => weightSlots(cfg, tpShard(cfg, tpSize, k)));
}

/** The slot's slice write (loader geometry into the preprocessed layout; the processed one too unless expert-swap). */
export function slotGeometry(s: SlotDescriptor): SliceGeometry {
  return { view: s.region.view, dim: s.region.dim, start: s.region.start, len: s.region.len, dstOffset: s.dstOffset };
}

/** Elements of the HF tensor the slot holds. */
export function slotNumel(s: SlotDescriptor): number {
  return (numel(s.region.view) / s.region.view[s.region.dim]!) * s.region.len;
}

/** Slots by HF name. */
export function slotsByHf(slots: readonly SlotDescriptor[]): Map<string, SlotDescriptor[]> {
  const out = new Map<string, SlotDescriptor[]>();
  for (const s of slots) out.set(s.hf, [...(out.get(s.hf) ?? []), s]);
  return out;
}

/** Checks a slot read back from JSON; throws naming what is wrong. */
export function checkSlot(x: unknown, from: string): SlotDescriptor {
  const s = x as SlotDescriptor;
  const ints = (v: unknown) => Array.isArray(v) && v.every((e) => Number.isSafeInteger(e) && e >= 0);
  const ok =
    !!s &&
    typeof s === 'object' &&
    typeof s.hf === 'string' &&
    typeof s.param === 'string' &&
    ints(s.shape) &&
    Array.isArray(s.parts) &&
    !!s.region &&
    ints(s.region.view) &&
    Number.isSafeInteger(s.region.dim) &&
    s.region.dim >= 0 &&
    s.region.dim < s.region.view.length &&
    Number.isSafeInteger(s.region.start) &&
    Number.isSafeInteger(s.region.len) &&
    s.region.start >= 0 &&
    s.region.start + s.region.len <= s.region.view[s.region.dim]! &&
    numel(s.region.view) === numel(s.shape) &&
    Number.isSafeInteger(s.tpSize) &&
    Number.isSafeInteger(s.tpRank) &&
    s.tpRank >= 0 &&
    s.tpRank < s.tpSize &&
    Number.isSafeInteger(s.replicas) &&
    s.replicas >= 1 &&
    Number.isSafeInteger(s.dstOffset) &&
    ['identity', 'qkv-pack', 'gate-up-pack', 'expert-swap'].includes(s.transform) &&
    ['preprocessed', 'processed'].includes(s.layout);
  if (!ok) {
    throw new InvalidArgumentError(
      `Weight slots from ${from}: ${JSON.stringify(x)?.slice(0, 200)} is not a slot descriptor. HINT: every engine rank must run the same Ascent build and publish engine.weightSlots().`,
      { from },
    );
  }
  return s;
}
