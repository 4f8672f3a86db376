/**
 * The weight-source contract between a training strategy and whoever reads its weights
 * (the weight sync): per source tensor a rank holds, its key, its global shape, its
 * placement over one communicator (placement.ts: Shard(dim) with torch.chunk semantics, or
 * Replicate), the local flat device view (a Shard piece padded to the ceil chunk, as fsdp2
 * keeps it) and how the global tensor maps to Hugging Face tensors:
 *
 * - identity: the global tensor is the HF tensor `hf`;
 * - qkv: Megatron's linear_qkv [nKV·(g+2)·D, H], rows interleaved by query group (g query
 *   heads, then k, then v); Shard(0) parts are runs of whole groups;
 * - gate-up: Megatron's dense linear_fc1, where Shard(0) part t holds gate_t ‖ up_t (so the
 *   concatenated parts are NOT gate ‖ up);
 * - experts: the stacked local experts [E, …] of one layer; the global tensor is the fused
 *   HF tensor `hf`, one expert per dim-0 row (Shard(0) over the expert-parallel group).
 *
 * A SourceDescriptor is the same without tensors or communicators (plain JSON), so ranks
 * that do not hold the strategy (server-mode engine ranks) plan from it. `owner` marks the
 * rank that sends its piece: over a strategy's ranks the owners' pieces cover every HF
 * tensor exactly once. hfViews() is the mapping, implemented once: the affine views from a
 * piece's local elements to HF canonical indices.
 */
import type { Communicator } from '../runtime/comm/comm.js';
import type { Tensor } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import { chunkRange, type ReplicatePlacement, type ShardPlacement } from './placement.js';

export type HfMapping =
  | { kind: 'identity'; hf: string }
  | { kind: 'qkv'; q: string; k: string; v: string; heads: number; kvHeads: number; headDim: number }
  | { kind: 'gate-up'; gate: string; up: string }
  | { kind: 'experts'; hf: string };

export interface SourceDescriptor {
  key: string;
  /** The global (unsharded) shape. */
  shape: number[];
  placement: ShardPlacement | ReplicatePlacement;
  /** Ranks of the placement's communicator (1: the rank holds the global tensor). */
  parts: number;
  /** This rank's index in it. */
  part: number;
  /** Elements of the local flat view: the ceil chunk for a Shard (trailing padding), numel for Replicate. */
  localNumel: number;
  map: HfMapping;
  /** This rank sends its piece (owners' pieces cover every HF tensor once). */
  owner: boolean;
}

export interface WeightSource extends SourceDescriptor {
  /** The communicator the placement is over (null: parts = 1). */
  comm: Communicator | null;
  /** The local piece, flat: [localNumel] (a view into the strategy's memory; never released by readers). */
  local: Tensor;
}

/** Every source of one strategy rank, as plain JSON. */
export interface RankSources {
  /** The strategy's layout name ('dp2', 'tp2', …), for messages. */
  layout: string;
  sources: SourceDescriptor[];
}

/** Affine map from a piece's local elements to an HF tensor's flat indices (the same shape as sync/fingerprint.ts). */
export interface AffineView {
  shape: number[];
  local: number[];
  localOffset: number;
  global: number[];
  globalOffset: number;
}

export interface HfView {
  hf: string;
  /** The HF tensor's full shape. */
  shape: number[];
  view: AffineView;
}

export const numelOf = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

/** The descriptor of a source (tensors and communicators dropped). */
export function describeSource(s: SourceDescriptor): SourceDescriptor {
  const { key, shape, placement, parts, part, localNumel, map, owner } = s;
  return {
    key,
    shape: [...shape],
    placement: placement.kind === 'shard' ? { kind: 'shard', dim: placement.dim, allowEmpty: placement.allowEmpty } : { kind: 'replicate' },
    parts,
    part,
    localNumel,
    map: { ...map },
    owner,
  };
}

/** [start, end) along the sharded dim that part `part` holds (the whole dim for Replicate). */
export function partRange(d: SourceDescriptor, part = d.part): [number, number] {
  if (d.placement.kind !== 'shard') return [0, d.shape[0] ?? 1];
  return chunkRange(d.shape[d.placement.dim]!, d.parts, part);
}

/**
 * The HF tensors part `part` of source `d` holds, each as an affine view from the part's
 * local flat elements to the HF tensor's flat indices (empty pieces are left out).
 */
export function hfViews(d: SourceDescriptor, part = d.part): HfView[] {
  const S = d.shape;
  const m = d.map;
  const dim = d.placement.kind === 'shard' ? d.placement.dim : 0;
  const [r0, r1] = partRange(d, part);
  const n = r1 - r0;
  if (n === 0) return [];
  const inner = numelOf(S.slice(dim + 1)),
    outer = numelOf(S.slice(0, dim));
  if (m.kind === 'identity' || m.kind === 'experts') {
    const view: AffineView =
      outer === 1
        ? { shape: [n * inner], local: [1], localOffset: 0, global: [1], globalOffset: r0 * inner }
        : { shape: [outer, n * inner], local: [n * inner, 1], localOffset: 0, global: [S[dim]! * inner, 1], globalOffset: r0 * inner };
    return [{ hf: m.hf, shape: [...S], view }];
  }
  if (dim !== 0)
    throw new InvalidArgumentError(`Weight source ${d.key}: a ${m.kind} mapping needs Shard(0) or Replicate but has Shard(${dim}).`, { source: d.key });
  const H = inner;
  if (m.kind === 'gate-up') {
    // Part t = gate_t ‖ up_t, I/parts rows each (parts divide I: no padding).
    const I = S[0]! / 2,
      Il = n / 2;
    return [
      { hf: m.gate, shape: [I, H], view: flat(Il * H, 0, (r0 / 2) * H) },
      { hf: m.up, shape: [I, H], view: flat(Il * H, Il * H, (r0 / 2) * H) },
    ];
  }
  const { heads: nH, kvHeads: nKV, headDim: D } = m;
  const g = nH / nKV,
    row = (g + 2) * D * H;
  const groups = n / ((g + 2) * D),
    first = r0 / ((g + 2) * D);
  if (!Number.isInteger(groups) || !Number.isInteger(first)) {
    throw new InvalidArgumentError(
      `Weight source ${d.key}: part ${part} of ${d.parts} does not hold whole query groups. HINT: the parts must divide the ${nKV} KV heads.`,
      { source: d.key },
    );
  }
  return [
    {
      hf: m.q,
      shape: [nH * D, H],
      view: { shape: [groups, g * D * H], local: [row, 1], localOffset: 0, global: [g * D * H, 1], globalOffset: first * g * D * H },
    },
    {
      hf: m.k,
      shape: [nKV * D, H],
      view: { shape: [groups, D * H], local: [row, 1], localOffset: g * D * H, global: [D * H, 1], globalOffset: first * D * H },
    },
    {
      hf: m.v,
      shape: [nKV * D, H],
      view: { shape: [groups, D * H], local: [row, 1], localOffset: (g + 1) * D * H, global: [D * H, 1], globalOffset: first * D * H },
    },
  ];
}

function flat(n: number, localOffset: number, globalOffset: number): AffineView {
  return { shape: [n], local: [1], localOffset, global: [1], globalOffset };
}

/** The HF tensors a source maps to (over every part). */
export function hfNames(d: SourceDescriptor): string[] {
  const m = d.map;
  return m.kind === 'qkv' ? [m.q, m.k, m.v] : m.kind === 'gate-up' ? [m.gate, m.up] : [m.hf];
}

/** Checks a descriptor read back from JSON (another rank's); throws naming what is wrong. */
export function checkDescriptor(x: unknown, from: string): SourceDescriptor {
  const d = x as SourceDescriptor;
  const ints = (v: unknown) => Array.isArray(v) && v.every((e) => Number.isSafeInteger(e) && e >= 0);
  const ok =
    !!d &&
    typeof d === 'object' &&
    typeof d.key === 'string' &&
    ints(d.shape) &&
    !!d.placement &&
    (d.placement.kind === 'replicate' ||
      (d.placement.kind === 'shard' && Number.isSafeInteger(d.placement.dim) && d.placement.dim >= 0 && d.placement.dim < d.shape.length)) &&
    Number.isSafeInteger(d.parts) &&
    d.parts >= 1 &&
    Number.isSafeInteger(d.part) &&
    d.part >= 0 &&
    d.part < d.parts &&
    Number.isSafeInteger(d.localNumel) &&
    d.localNumel >= 0 &&
    typeof d.owner === 'boolean' &&
    !!d.map &&
    ['identity', 'qkv', 'gate-up', 'experts'].includes(d.map.kind);
  if (!ok) {
    throw new InvalidArgumentError(
      `Weight sources from ${from}: ${JSON.stringify(x)?.slice(0, 200)} is not a source descriptor. HINT: every trainer rank must run the same Ascent build and publish strategy.weightSources().`,
      { from },
    );
  }
  return d;
}
