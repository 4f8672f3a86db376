/**
 * Server-mode sync plan, from the trainer ranks' weight-source descriptors (plain JSON,
 * all-gathered by server.ts; parallel/weight-sources.ts): what each trainer rank sends
 * ("pieces": the local views of the sources it owns, so nothing is sent twice over the
 * trainer group) and how the engine side puts each source back together (its parts side
 * by side). Every rank computes every trainer rank's pieces from the same descriptors, so
 * all ranks agree on the broadcast schedule. Pieces of sources split over several ranks
 * come first (the same list on every rank of a placement, so their buckets line up), whole
 * ones after.
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import type { DType } from '../runtime/device/dtype.js';
import { checkDescriptor, type RankSources, type SourceDescriptor } from '../parallel/weight-sources.js';

export interface Piece {
  /** The source key. */
  name: string;
  /** Which part of it (the rank's index in the placement; 0 when whole). */
  part: number;
  bytes: number;
}

/** How a source is assembled: `parts` pieces of `partNumel` elements side by side. */
export interface Assembly {
  name: string;
  parts: number;
  partNumel: number;
  /** The dtype it travels as (sync/wire.ts; set by the sync once the engine precision is known). */
  wire: DType;
  /** The source (its `part` is that of whichever rank described it; readers pass the part). */
  source: SourceDescriptor;
}

/** `size`: bytes per element a source travels as (4 for fp32; 2 for a bf16 engine's matmul weights, sync/wire.ts). */
export function piecesOf(sources: readonly SourceDescriptor[], size: (s: SourceDescriptor) => number = () => 4): Piece[] {
  const mine = sources.filter((s) => s.owner);
  return [...mine.filter((s) => s.parts > 1), ...mine.filter((s) => s.parts === 1)].map((s) => ({ name: s.key, part: s.part, bytes: s.localNumel * size(s) }));
}

/** Every source the engine side assembles, by key (`wire`: the dtype each travels as, fp32 by default). */
export function assemblies(ranks: readonly RankSources[], wire: (s: SourceDescriptor) => DType = () => 'fp32'): Map<string, Assembly> {
  const out = new Map<string, Assembly>();
  for (const r of ranks)
    for (const s of r.sources) if (!out.has(s.key)) out.set(s.key, { name: s.key, parts: s.parts, partNumel: s.localNumel, wire: wire(s), source: s });
  return out;
}

/** Trainer ranks' descriptors read back from JSON: checked, and one strategy over all of them. */
export function checkRankSources(all: unknown[], trainerRanks: number): RankSources[] {
  const ranks = all.map((x, r) => {
    const rs = x as RankSources;
    if (!rs || typeof rs.layout !== 'string' || !Array.isArray(rs.sources)) {
      throw new InvalidArgumentError(
        `ServerSync: trainer rank ${r} sent no weight sources. HINT: every trainer rank passes { strategy } to ServerSync.create().`,
        { trainerRank: r },
      );
    }
    return { layout: rs.layout, sources: rs.sources.map((s) => checkDescriptor(s, `trainer rank ${r}`)) };
  });
  const first = ranks[0]!;
  const keys = (rs: RankSources) => rs.sources.map((s) => `${s.key}/${s.parts}/${s.localNumel}`).join();
  ranks.forEach((rs, r) => {
    if (rs.layout !== first.layout || keys(rs) !== keys(first)) {
      throw new InvalidArgumentError(
        `ServerSync: trainer ranks 0 (${first.layout}) and ${r} (${rs.layout}) hold different weight sources; every trainer rank must pass its shard of the same strategy.`,
        { trainerRank: r },
      );
    }
  });
  const owned = new Map<string, number>();
  for (const rs of ranks) for (const s of rs.sources) if (s.owner) owned.set(s.key, (owned.get(s.key) ?? 0) + 1);
  const lacking = first.sources.find((s) => owned.get(s.key) !== s.parts);
  if (lacking) {
    throw new InvalidArgumentError(
      `ServerSync: the ${trainerRanks} trainer ranks own ${owned.get(lacking.key) ?? 0} of the ${lacking.parts} parts of ${lacking.key}. HINT: pass trainerRanks = the strategy's rank count.`,
      { trainerRanks, source: lacking.key },
    );
  }
  return ranks;
}
