/**
 * Gathered rounds of a server-mode sync: when every segment of bucket round b, on every
 * trainer rank, is small (at most `coalesceBytes`), the round is ONE allToAllV over the
 * sync communicator instead of one broadcast per trainer rank. Each trainer rank packs its
 * bucket into its staging buffer (buckets.ts packSmall) and sends it to every engine rank;
 * every engine rank receives all the trainer ranks' packs side by side in one slot.
 *
 * Why: for a small model each broadcast costs its rendezvous, not its bytes, and an engine
 * rank takes part in the trainer ranks' broadcasts one after the other (8 trainer ranks:
 * 8 arrival and 8 departure barriers in a row, each waiting for the slowest of 9 threads
 * on a shared machine). One allToAllV is one arrival and one departure barrier over every
 * rank, with the same bytes moved (trainer ranks receive nothing, engine ranks send nothing).
 *
 * A pure function of the bucket plans and the thresholds, so every rank derives the same
 * rounds with no extra message. Not used across processes (SpanningCommunicator runs
 * allToAllV as a padded allToAll through the host), nor with one trainer rank (its round
 * is one broadcast already).
 */
import type { Communicator } from '../runtime/comm/comm.js';
import type { Stream, Tensor } from '../runtime/device/device-index.js';
import { packSmall, type Bucket } from './buckets.js';

export interface GatherRound {
  /** Per trainer rank: its packing of this round's bucket (null: it has no bucket b). */
  packs: Array<{ at: Array<number | null>; elems: number } | null>;
  /** Per trainer rank: where its pack lands in an engine rank's slot (elements, 16-aligned). */
  offsets: number[];
  /** Elements an engine rank receives in this round (every pack, side by side). */
  elems: number;
}

/**
 * Per round: a GatherRound when every non-empty segment of every trainer rank's bucket b is
 * at most `coalesceBytes` and the engine side's slot for the round stays within
 * `bucketBytes` (the sync's memory budget per bucket); else null (broadcasts as before).
 */
export function planGatherRounds(plans: readonly Bucket[][], coalesceBytes: number, bucketBytes: number): Array<GatherRound | null> {
  const rounds = Math.max(0, ...plans.map((p) => p.length));
  if (plans.length < 2) return Array.from({ length: rounds }, () => null);
  return Array.from({ length: rounds }, (_, b) => {
    const packs = plans.map((pl) => (pl[b] ? packSmall(pl[b], coalesceBytes, 1) : null));
    const all = packs.every((p, r) => !p || plans[r]![b]!.segments.every((s, i) => s.bytes === 0 || p.at[i] != null));
    if (!all) return null;
    const offsets: number[] = [];
    let elems = 0;
    for (const p of packs) {
      offsets.push(elems);
      elems += p?.elems ?? 0;
    }
    return elems * 4 <= bucketBytes ? { packs, offsets, elems } : null;
  });
}

/**
 * Enqueues the round's allToAllV on `stream` (collective over `comm`: trainer ranks are
 * group ranks 0..trainerRanks-1). A trainer rank sends the first `packs[rank].elems`
 * elements of `buf` (its packed bucket; nothing when it has no bucket b) to every engine
 * rank; an engine rank receives every pack into `buf` at the round's offsets. `empty`: an
 * fp32 tensor (an empty view will do) standing in for the side that moves nothing.
 */
export function enqueueGather(comm: Communicator, trainerRanks: number, round: GatherRound, buf: Tensor, empty: Tensor, stream: Stream): Promise<void> {
  const zeros = new Array<number>(comm.size).fill(0);
  if (comm.rank < trainerRanks) {
    const n = round.packs[comm.rank]?.elems ?? 0;
    const counts = zeros.map((_, q) => (q >= trainerRanks ? n : 0));
    return comm.allToAllV(buf, counts, zeros, empty, zeros, zeros, stream);
  }
  const counts = zeros.map((_, q) => (q < trainerRanks ? (round.packs[q]?.elems ?? 0) : 0));
  const displs = zeros.map((_, q) => (q < trainerRanks ? round.offsets[q]! : 0));
  return comm.allToAllV(empty, zeros, zeros, buf, counts, displs, stream);
}
