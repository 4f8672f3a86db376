/**
 * The host-side planning of SpanningCommunicator's collectives that reshape data
 * between processes: the block order of allToAll's leg between processes, the
 * count matrix of allToAllV, and which split colors span processes. Pure functions
 * over what every rank gathered, so every rank reaches the same verdict (a bad call
 * fails on all ranks alike instead of leaving some waiting).
 *
 * Ranks are process-major: global rank = process x n + local rank (n ranks per process).
 */
import { CollectiveMismatchError, InvalidArgumentError } from '../errors.js';

/**
 * allToAll's leg between processes. `gathered` is this process's ranks' sends, [a][dst][c]
 * (a = local source, dst = global destination, c = bytes per chunk); the result holds
 * one block per destination process q, [q][a][b][c] (b = local destination on q).
 */
export function packAllToAll(gathered: Uint8Array, n: number, processes: number, c: number): Uint8Array {
  const size = n * processes;
  const out = new Uint8Array(gathered.length);
  for (let q = 0; q < processes; q++) {
    for (let a = 0; a < n; a++) {
      // Chunks for q's ranks are contiguous in a's send: dst = q·n .. q·n + n - 1.
      const from = (a * size + q * n) * c;
      out.set(gathered.subarray(from, from + n * c), (q * n + a) * n * c);
    }
  }
  return out;
}

/** The inverse side: `received` holds block p = [a][b][c] from process p; the result is [b][src][c] (src = p·n + a). */
export function unpackAllToAll(received: Uint8Array, n: number, processes: number, c: number): Uint8Array {
  const size = n * processes;
  const out = new Uint8Array(received.length);
  for (let p = 0; p < processes; p++) {
    for (let a = 0; a < n; a++) {
      for (let b = 0; b < n; b++) {
        const from = ((p * n + a) * n + b) * c;
        out.set(received.subarray(from, from + c), (b * size + p * n + a) * c);
      }
    }
  }
  return out;
}

/**
 * allToAllV's counts as every rank gathered them: rank r's row is [sendCounts(size), recvCounts(size)].
 * Rank q's sendCounts[r] must equal rank r's recvCounts[q]; returns the largest count.
 */
export function checkAllToAllVCounts(rows: BigInt64Array, size: number): number {
  const bad: string[] = [];
  const culprits = new Set<number>();
  let max = 0;
  for (let q = 0; q < size; q++) {
    for (let r = 0; r < size; r++) {
      const sent = Number(rows[q * 2 * size + r]!);
      const expected = Number(rows[r * 2 * size + size + q]!);
      max = Math.max(max, sent);
      if (sent !== expected) {
        bad.push(`rank ${q} sends ${sent} elements to rank ${r}, which expects ${expected}`);
        culprits.add(q).add(r);
      }
    }
  }
  if (bad.length > 0) {
    const shown = bad.slice(0, 4).join('; ') + (bad.length > 4 ? `; and ${bad.length - 4} more` : '');
    throw new CollectiveMismatchError(
      `allToAllV() across processes: the counts disagree: ${shown}. HINT: rank q's sendCounts[r] must equal rank r's recvCounts[q] on every pair of ranks.`,
      { culpritWorldRanks: [...culprits].sort((a, b) => a - b) },
    );
  }
  return max;
}

export interface SplitPlan {
  /** Members of each color, in the new communicator's order (key, then rank). */
  groups: Map<number, number[]>;
  /** Colors whose members sit in more than one process, ascending. */
  spanning: number[];
  /** For each spanning color: its members in each of its processes, process by process (unequal counts make it ragged). */
  counts: Map<number, number[]>;
}

/**
 * Groups every rank's (color, key) (rows of 2, as gathered) and checks that each color
 * spanning processes has the shape the hierarchical collectives need: its members
 * ordered process by process (a block of ranks per process, processes ascending).
 * The blocks may differ in size (a ragged color, e.g. one trainer rank with every rank
 * of an engine process: a weight sync's fan-out), which SpanningCommunicator serves for
 * the collectives that do not need equal blocks.
 */
export function planSplit(pairs: BigInt64Array, n: number): SplitPlan {
  const size = pairs.length / 2;
  const byColor = new Map<number, Array<{ rank: number; key: number }>>();
  for (let r = 0; r < size; r++) {
    const color = Number(pairs[2 * r]!);
    if (color < 0) continue;
    const list = byColor.get(color) ?? [];
    list.push({ rank: r, key: Number(pairs[2 * r + 1]!) });
    byColor.set(color, list);
  }
  const groups = new Map<number, number[]>();
  const spanning: number[] = [];
  const counts = new Map<number, number[]>();
  for (const [color, list] of [...byColor.entries()].sort((a, b) => a[0] - b[0])) {
    const members = list.sort((x, y) => x.key - y.key || x.rank - y.rank).map((m) => m.rank);
    groups.set(color, members);
    const procs = members.map((r) => Math.floor(r / n));
    const distinct = [...new Set(procs)];
    if (distinct.length < 2) continue;
    spanning.push(color);
    // In process order: each process's members form one block, and the blocks ascend.
    const blocks = procs.filter((p, i) => i === 0 || p !== procs[i - 1]).length;
    const ordered = blocks === distinct.length && distinct.every((p, i) => i === 0 || p > distinct[i - 1]!);
    if (!ordered) {
      throw new InvalidArgumentError(
        `split() across processes: color ${color} has members [${members.join(', ')}] (in key order), which are not ordered process by process. HINT: give keys that keep a color's ranks in process order (the default key = rank does).`,
        { argument: 'color', color, members },
      );
    }
    counts.set(
      color,
      distinct.map((p) => procs.filter((q) => q === p).length),
    );
  }
  return { groups, spanning, counts };
}
