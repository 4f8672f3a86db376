/**
 * What `launch` says when a run fails: which rank is most likely at fault (the
 * culprit), and the ranks' errors grouped so an error every rank raised is printed
 * once ("on all 16 ranks"), not sixteen times.
 *
 * The culprit is chosen, in this order, from:
 *  1. a rank that failed on its own: an error that is not a collective failure
 *     (a thrown error, a crash, a non-zero exit), the first to arrive;
 *  2. votes: the `details.culpritWorldRanks` of every failed rank's collective
 *     error (the differing rank of a mismatch, the missing ranks of a timeout, the
 *     dead peer of an abort); the most named ranks win;
 *  3. a rank that left while the others failed in collectives: it exited (even
 *     with code 0), hung (did not stop within the grace period) or was still
 *     running or had finished its main when the others failed waiting for it;
 *  4. otherwise the first rank that failed.
 */

/** How one rank ended. */
export type RankEnd =
  /** main(ctx) returned. */
  | 'done'
  /** main(ctx) threw (or rejected). */
  | 'failed'
  /** An uncaught exception ended the worker. */
  | 'crashed'
  /** The worker exited on its own (process.exit) before main returned. */
  | 'exited'
  /** It did not stop within the grace period and was terminated. */
  | 'hung'
  /** It stopped when asked (after another rank failed or a signal). */
  | 'stopped';

export interface RankErrorInfo {
  name: string;
  code?: string;
  message: string;
  stack?: string;
  details?: Record<string, unknown>;
}

export interface RankOutcome {
  rank: number;
  end: RankEnd;
  error?: RankErrorInfo;
  exitCode?: number;
  /** Arrival order of failures (lower first); undefined for ranks that did not fail. */
  order?: number;
}

export interface Culprit {
  ranks: number[];
  reason: string;
}

/** Errors that are a collective failing around a rank, not that rank's own fault. */
const COLLECTIVE_CODES = new Set(['ASCENT_COLLECTIVE_MISMATCH', 'ASCENT_COLLECTIVE_TIMEOUT', 'ASCENT_P2P_DEADLOCK', 'ASCENT_COMM_ABORTED']);
/** Errors that mean the user asked for something invalid (exit 2, one line, no stack). */
const USAGE_CODES = new Set(['ASCENT_CONFIG']);

export const isCollectiveError = (e: RankErrorInfo | undefined): boolean => e?.code !== undefined && COLLECTIVE_CODES.has(e.code);
export const isUsageError = (e: RankErrorInfo | undefined): boolean => e?.code !== undefined && USAGE_CODES.has(e.code);

/** A rank that failed: threw, crashed, or exited with a non-zero code. */
export const isFailure = (o: RankOutcome): boolean => o.end === 'failed' || o.end === 'crashed' || (o.end === 'exited' && (o.exitCode ?? 0) !== 0);
const byArrival = (a: RankOutcome, b: RankOutcome) => (a.order ?? Infinity) - (b.order ?? Infinity) || a.rank - b.rank;

function culpritVotes(failed: RankOutcome[]): Map<number, number> {
  const votes = new Map<number, number>();
  for (const o of failed) {
    const named = o.error?.details?.culpritWorldRanks;
    if (!Array.isArray(named)) continue;
    for (const r of new Set(named)) {
      if (typeof r === 'number' && Number.isInteger(r) && r >= 0) votes.set(r, (votes.get(r) ?? 0) + 1);
    }
  }
  return votes;
}

export function pickCulprit(outcomes: readonly RankOutcome[]): Culprit | undefined {
  const failed = outcomes.filter(isFailure).sort(byArrival);
  const own = failed.filter((o) => !isCollectiveError(o.error));
  if (own.length > 0) {
    const first = own[0]!;
    const how =
      first.end === 'crashed' ? 'crashed' : first.end === 'exited' ? `exited with code ${first.exitCode}` : `failed with ${first.error?.name ?? 'an error'}`;
    return { ranks: [first.rank], reason: `${how}; the other failures followed it` };
  }
  const votes = culpritVotes(failed);
  if (votes.size > 0) {
    const top = Math.max(...votes.values());
    const ranks = [...votes]
      .filter(([, n]) => n === top)
      .map(([r]) => r)
      .sort((a, b) => a - b);
    const named = `named by the collective errors of ${top} failed rank${top === 1 ? '' : 's'}`;
    // Say what the named rank did when its own outcome tells more than the vote.
    const how = new Set(ranks.map((r) => outcomes.find((o) => o.rank === r)?.end));
    if (how.size === 1 && how.has('exited')) return { ranks, reason: `exited while the others waited in a collective; ${named}` };
    if (how.size === 1 && how.has('hung')) return { ranks, reason: `hung (did not stop within the grace period); ${named}` };
    return { ranks, reason: named };
  }
  if (failed.length > 0) {
    // Every failure is a collective one: the ranks that were not in it are suspects.
    const left = (end: RankEnd) => outcomes.filter((o) => o.end === end).map((o) => o.rank);
    const exited = left('exited');
    if (exited.length > 0) return { ranks: exited, reason: 'exited while the others waited in a collective' };
    const hung = left('hung');
    if (hung.length > 0) return { ranks: hung, reason: 'hung (did not stop within the grace period) while the others failed waiting' };
    const absent = outcomes.filter((o) => !isFailure(o)).map((o) => o.rank);
    if (absent.length > 0) return { ranks: absent, reason: 'did not join the collective the others failed in' };
    return { ranks: [failed[0]!.rank], reason: 'first to fail' };
  }
  return undefined;
}

export interface ErrorGroup {
  ranks: number[];
  /** How these ranks ended: failed / crashed / exited with code N. */
  how: string;
  error?: RankErrorInfo;
}

function howOf(o: RankOutcome): string {
  if (o.end === 'crashed') return 'crashed';
  if (o.end === 'exited') return `exited with code ${o.exitCode}`;
  return 'failed';
}

/**
 * Ranks whose failures are the same: how they ended, the error class and the message
 * with the rank's mentions of itself masked ("rank 2's allReduce" on rank 2 equals
 * "rank 5's allReduce" on rank 5). Collective errors of one class are one group
 * whatever their wording (each rank describes the same failed collective from where
 * it stood).
 */
function sameErrorKey(o: RankOutcome): string {
  if (isCollectiveError(o.error)) return `${howOf(o)}\u0000${o.error!.name}`;
  return `${howOf(o)}\u0000${o.error?.name ?? ''}\u0000${maskOwnRank(o)}`;
}

function maskOwnRank(o: RankOutcome): string {
  return (o.error?.message ?? '').replace(new RegExp(`\\brank ${o.rank}\\b`, 'g'), 'rank <self>');
}

export interface ShownGroup extends ErrorGroup {
  /** The rank whose error is shown for the group. */
  shownRank: number;
  /** Every rank's message is the same (up to its own rank number). */
  identical: boolean;
}

/**
 * Failed ranks grouped by the same failure (sameErrorKey), in arrival order, the
 * culprit's group first. A group shows the error of its first rank.
 */
export function groupFailures(outcomes: readonly RankOutcome[], culprit?: readonly number[]): ShownGroup[] {
  const groups = new Map<string, ShownGroup & { text: string }>();
  for (const o of outcomes.filter(isFailure).sort(byArrival)) {
    const key = sameErrorKey(o);
    const g = groups.get(key);
    if (g) {
      g.ranks.push(o.rank);
      if (maskOwnRank(o) !== g.text) g.identical = false;
    } else {
      groups.set(key, { ranks: [o.rank], how: howOf(o), shownRank: o.rank, identical: true, text: maskOwnRank(o), ...(o.error ? { error: o.error } : {}) });
    }
  }
  const blamed = (g: ErrorGroup) => (culprit ?? []).some((r) => g.ranks.includes(r));
  return [...groups.values()]
    .map(({ text: _text, ...g }) => ({ ...g, ranks: g.ranks.sort((a, b) => a - b) }))
    .sort((a, b) => Number(blamed(b)) - Number(blamed(a)));
}

/** "rank 3", "ranks [1, 4]" or "all 16 ranks". */
export function describeRanks(ranks: readonly number[], worldSize: number): string {
  if (ranks.length === worldSize && worldSize > 1) return `all ${worldSize} ranks`;
  if (ranks.length === 1) return `rank ${ranks[0]}`;
  return `ranks [${ranks.join(', ')}]`;
}

/**
 * True when the run failed only because of bad input: every failure that is not a
 * consequence of another (a collective aborted around it) is a ConfigError.
 */
export function isUsageFailure(outcomes: readonly RankOutcome[]): boolean {
  const failed = outcomes.filter(isFailure);
  const roots = failed.filter((o) => !isCollectiveError(o.error));
  return roots.length > 0 && roots.every((o) => isUsageError(o.error));
}
