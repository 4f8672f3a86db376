/**
 * What a full server-mode sync derives from the exchanged weight sources and the engine
 * precision alone: the dtype each source travels as, every trainer rank's bucket plan, the
 * gathered rounds, this rank's packing of the buckets it sends or receives, and the bytes a
 * sync moves. Both inputs are fixed after the first full sync (the sources are exchanged
 * once: a strategy's placements do not change; the engine precision comes with them), so a
 * ServerSync builds its program once and every later sync reuses it.
 *
 * Why: at 16 ranks the per-sync JS is a large share of a sync's CPU (a profile of the
 * tiny-model quickstart put ~35% of all CPU inside the sync window in ServerSync.sync, run
 * once per step per rank and so never optimised); rebuilding these maps and plans on every
 * rank every step was a good part of it, and every rank shares the same two cores.
 */
import { dtypeSize, type DType } from '../runtime/device/dtype.js';
import type { ModelConfig } from '../model/config.js';
import type { RankSources, SourceDescriptor } from '../parallel/weight-sources.js';
import type { EngineDtype } from '../rollout/weight-dtype.js';
import { packSmall, planBuckets, type Bucket, type Segment } from './buckets.js';
import { planGatherRounds, type GatherRound } from './server-gather.js';
import { assemblies, piecesOf, type Assembly } from './server-plan.js';
import { wireBytes, wireDtype } from './wire.js';

/** A bucket's packing (buckets.ts packSmall): each segment's element offset in the pack (null: not packed) and the pack's size. */
export type Pack = { at: Array<number | null>; elems: number };

export interface SyncProgram {
  /** The dtype source `d` travels as. */
  wire(d: SourceDescriptor): DType;
  /** The dtype segment `seg` (of a source piece) travels as. */
  wireOf(seg: Segment): DType;
  /** Per trainer rank: its bucket plan. */
  readonly plans: readonly Bucket[][];
  /** Bucket rounds: the most buckets any trainer rank has. */
  readonly rounds: number;
  /** Per round: one allToAllV over every rank (server-gather.ts), or null (broadcasts). */
  readonly gathers: ReadonlyArray<GatherRound | null>;
  /** Per trainer rank, per bucket: its packing; empty for the trainer ranks this rank neither is nor receives from. */
  readonly packs: ReadonlyArray<readonly Pack[]>;
  /** Every source the engine side assembles, by key (server-plan.ts). */
  readonly assemblies: Map<string, Assembly>;
  /** Bytes of every HF tensor as the sync moves them (the report's `bytes`). */
  readonly bytes: number;
}

export interface ProgramInputs {
  ranks: readonly RankSources[];
  engineDtype: EngineDtype;
  cfg: ModelConfig;
  bucketBytes: number;
  coalesceBytes: number;
  /** Whether gathered rounds may be used (not across processes: see server-gather.ts). */
  gather: boolean;
  /** This rank: a trainer rank packs only its own buckets; an engine rank unpacks every trainer rank's. */
  trainerRank: number | null;
}

/** The name of part `part` of source `name` in the bucket plans (segment names carry it; the trainer's piece map is keyed by it). */
export const pieceKey = (name: string, part: number): string => `${name}#${part}`;

export function buildProgram(p: ProgramInputs): SyncProgram {
  const { ranks, engineDtype, cfg } = p;
  const wire = (d: SourceDescriptor) => wireDtype(cfg, d, engineDtype);
  const wires = new Map(ranks.flatMap((rs) => rs.sources.map((d) => [d.key, wire(d)] as const)));
  const wireOf = (seg: Segment) => wires.get(seg.name.slice(0, seg.name.lastIndexOf('#')))!;
  const plans = ranks.map((rs) =>
    planBuckets(
      piecesOf(rs.sources, (d) => dtypeSize(wire(d))).map((x) => ({ name: pieceKey(x.name, x.part), bytes: x.bytes })),
      p.bucketBytes,
      { keepWhole: true },
    ),
  );
  const rounds = Math.max(...plans.map((x) => x.length));
  const gathers = p.gather ? planGatherRounds(plans, p.coalesceBytes, p.bucketBytes) : new Array<null>(rounds).fill(null);
  const packs = plans.map((pl, r) =>
    p.trainerRank === null || r === p.trainerRank ? pl.map((bk, b) => gathers[b]?.packs[r] ?? packSmall(bk, p.coalesceBytes)) : [],
  );
  return {
    wire,
    wireOf,
    plans,
    rounds,
    gathers,
    packs,
    assemblies: assemblies(ranks, wire),
    bytes: wireBytes(cfg, engineDtype),
  };
}
