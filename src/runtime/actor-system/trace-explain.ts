/**
 * Explains flight-recorder dumps (format: native/comm/dump.cc, version 1): for
 * each aborted communicator, why it was aborted and which world ranks are at fault,
 * which rank missed which collective, which fingerprints differ at the same
 * sequence number, and which ops were still running.
 *
 * A dump is written the moment the communicator aborts. After a fast abort (a
 * mismatch, a dead rank, abort()) healthy ranks that are merely slower have not
 * enqueued the latest collective yet: they are reported as "not-arrived" (had not
 * arrived when the abort came), never as missing. A rank is "missed" only when the
 * abort is a timeout at that seq and the timeout named it (it had the whole
 * timeout to arrive). Ranks are world ranks, plus local ones on a split.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { formatIssues } from '../config.js';
import { InvalidArgumentError } from '../errors.js';

const Mark = z.object({ id: z.number(), seq: z.number().nullable(), op: z.string(), atMs: z.number() }).nullable();
const Entry = z.object({
  id: z.number(),
  seq: z.number().nullable(),
  op: z.string(),
  fingerprint: z.string(),
  state: z.enum(['enqueued', 'started', 'completed', 'failed']),
  enqueuedAtMs: z.number(),
  startedAtMs: z.number().nullable(),
  endedAtMs: z.number().nullable(),
  error: z.string().nullable(),
});
export const FlightDumpSchema = z.object({
  format: z.literal('ascent.flight-recorder'),
  version: z.literal(1),
  communicator: z.string(),
  nranks: z.number().int().positive(),
  // Optional: dumps written before world ranks were recorded lack them.
  world: z.boolean().optional(),
  createdAtMs: z.number(),
  dumpedAtMs: z.number(),
  cause: z.object({ code: z.string(), message: z.string(), seq: z.number().nullable(), culpritWorldRanks: z.array(z.number().int()).optional() }),
  ranks: z.array(
    z.object({
      rank: z.number().int(),
      worldRank: z.number().int().optional(),
      device: z.number().int(),
      joined: z.boolean(),
      lastEnqueued: Mark,
      lastStarted: Mark,
      lastCompleted: Mark,
      entries: z.array(Entry),
    }),
  ),
});
export type FlightDump = z.infer<typeof FlightDumpSchema>;

export interface TraceFinding {
  kind: 'culprit' | 'never-joined' | 'missed' | 'not-arrived' | 'mismatch' | 'stuck' | 'failed';
  text: string;
}

export interface TraceReport {
  file: string;
  communicator: string;
  nranks: number;
  /** False for a communicator made by split (ranks are then named by world and local rank). */
  world: boolean;
  cause: FlightDump['cause'];
  findings: TraceFinding[];
}

function describeMark(m: z.infer<typeof Mark>): string {
  return m ? `#${m.id} ${m.op}${m.seq !== null ? ` (seq ${m.seq})` : ''}` : 'none';
}

function ranksList(rs: number[]): string {
  return rs.length === 1 ? `rank ${rs[0]}` : `ranks [${rs.join(', ')}]`;
}

const CULPRIT_WHY: Readonly<Record<string, string>> = {
  ASCENT_COLLECTIVE_TIMEOUT: 'never arrived before the timeout',
  ASCENT_COLLECTIVE_MISMATCH: 'its call differs from the others',
  ASCENT_P2P_DEADLOCK: 'blocked in a send/recv cycle',
  ASCENT_COMM_ABORTED: 'died or aborted the communicator',
};

/** Names ranks of one dump: world ranks, plus local ones on a split communicator. */
function namer(dump: FlightDump): { who(local: number): string; whoList(local: number[]): string; worldOf(local: number): number } {
  const world = dump.world ?? true;
  const worldOf = (r: number): number => dump.ranks.find((x) => x.rank === r)?.worldRank ?? r;
  const who = (r: number): string => (world ? `rank ${r}` : `world rank ${worldOf(r)} (local ${r})`);
  const whoList = (rs: number[]): string => {
    const sorted = [...rs].sort((a, b) => a - b);
    if (world || sorted.length === 1) return world ? ranksList(sorted) : who(sorted[0]!);
    return `world ranks [${sorted.map(worldOf).join(', ')}] (local [${sorted.join(', ')}])`;
  };
  return { who, whoList, worldOf };
}

/** What went wrong in one dump. */
export function explainDump(dump: FlightDump, file = ''): TraceReport {
  const findings: TraceFinding[] = [];
  const { who, whoList, worldOf } = namer(dump);
  const culprits = dump.cause.culpritWorldRanks;
  if (culprits?.length) {
    const names = culprits.map((w) => {
      const local = dump.ranks.find((r) => (r.worldRank ?? r.rank) === w)?.rank;
      return local === undefined ? `world rank ${w}` : who(local);
    });
    findings.push({ kind: 'culprit', text: `root cause: ${names.join(', ')} (${CULPRIT_WHY[dump.cause.code] ?? dump.cause.code}).` });
  }
  const joined = dump.ranks.filter((r) => r.joined);
  const never = dump.ranks.filter((r) => !r.joined).map((r) => r.rank);
  if (never.length) findings.push({ kind: 'never-joined', text: `${whoList(never)} never joined the communicator (init did not complete).` });

  // Collectives by sequence number: which rank issued what.
  const bySeq = new Map<number, Map<number, z.infer<typeof Entry>>>();
  for (const r of joined) {
    for (const e of r.entries) {
      if (e.seq === null) continue;
      let m = bySeq.get(e.seq);
      if (!m) bySeq.set(e.seq, (m = new Map()));
      m.set(r.rank, e);
    }
  }
  const oldestKept = Math.max(0, ...joined.map((r) => (r.entries.length ? Math.min(...r.entries.filter((e) => e.seq !== null).map((e) => e.seq!)) : 0)));
  for (const seq of [...bySeq.keys()].sort((a, b) => a - b)) {
    const m = bySeq.get(seq)!;
    const groups = new Map<string, number[]>();
    for (const [rank, e] of m) groups.set(e.fingerprint, [...(groups.get(e.fingerprint) ?? []), rank]);
    if (groups.size > 1) {
      const parts = [...groups.entries()].sort((a, b) => b[1].length - a[1].length).map(([fp, rs]) => `${whoList(rs)} called ${fp}`);
      findings.push({ kind: 'mismatch', text: `seq ${seq}: fingerprints differ: ${parts.join('; ')}.` });
    }
    // Ranks that have no op at this seq although a peer issued one (ring wrap aside):
    // missing only when the timeout at this seq named them, else not there yet.
    if (seq >= oldestKept) {
      const absent = joined.map((r) => r.rank).filter((r) => !m.has(r));
      const timedOutHere = dump.cause.code === 'ASCENT_COLLECTIVE_TIMEOUT' && dump.cause.seq === seq;
      const isMissing = (r: number): boolean => timedOutHere && (culprits === undefined || culprits.includes(worldOf(r)));
      const missing = absent.filter(isMissing);
      const late = absent.filter((r) => !isMissing(r));
      const [fp] = groups.keys();
      const issuers = whoList([...m.keys()]);
      const lasts = (rs: number[]): string =>
        rs
          .map(
            (r) =>
              `${who(r)} last enqueued ${describeMark(dump.ranks.find((x) => x.rank === r)!.lastEnqueued)}, last completed ${describeMark(dump.ranks.find((x) => x.rank === r)!.lastCompleted)}`,
          )
          .join('; ');
      if (missing.length)
        findings.push({ kind: 'missed', text: `seq ${seq}: ${whoList(missing)} never called ${fp} (issued by ${issuers}); ${lasts(missing)}.` });
      if (late.length) {
        const first = Math.min(...[...m.values()].map((e) => e.enqueuedAtMs));
        const after = Math.max(0, Math.round(dump.dumpedAtMs - first));
        findings.push({
          kind: 'not-arrived',
          text: `seq ${seq}: ${whoList(late)} had not yet arrived at ${fp} when the abort came, ${after} ms after ${issuers} issued it (not missing: still busy with earlier work); ${lasts(late)}.`,
        });
      }
    }
  }
  for (const r of joined) {
    for (const e of r.entries) {
      if (e.state === 'started' || e.state === 'enqueued') {
        if (e.state === 'started')
          findings.push({ kind: 'stuck', text: `${who(r.rank)}: ${e.fingerprint}${e.seq !== null ? ` (seq ${e.seq})` : ''} started and never completed.` });
        // A culprit of a timeout that did enqueue the op: its stream never got to it.
        else if (e.seq !== null && e.seq === dump.cause.seq && culprits?.includes(worldOf(r.rank))) {
          findings.push({
            kind: 'stuck',
            text: `${who(r.rank)}: ${e.fingerprint} (seq ${e.seq}) was enqueued but never started: its stream was still busy with earlier work.`,
          });
        }
      } else if (e.state === 'failed') {
        findings.push({
          kind: 'failed',
          text: `${who(r.rank)}: ${e.fingerprint}${e.seq !== null ? ` (seq ${e.seq})` : ''} failed with ${e.error ?? 'an error'}.`,
        });
      }
    }
  }
  return { file, communicator: dump.communicator, nranks: dump.nranks, world: dump.world ?? true, cause: dump.cause, findings };
}

/** Reads every dump in `path` (a folder or one file), oldest first. */
export function readDumps(path: string): Array<{ file: string; dump: FlightDump }> {
  let files: string[];
  try {
    files = statSync(path).isDirectory()
      ? readdirSync(path)
          .filter((f) => f.endsWith('.json'))
          .map((f) => join(path, f))
      : [path];
  } catch {
    throw new InvalidArgumentError(
      `No flight-recorder dumps at ${path}: it does not exist. HINT: dumps go to ASCENT_TRACE_DIR or <tmpdir>/ascent-flight-recorder; the error message names the file.`,
    );
  }
  const out: Array<{ file: string; dump: FlightDump }> = [];
  for (const file of files) {
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(file, 'utf8'));
    } catch (e) {
      throw new InvalidArgumentError(`${file} is not valid JSON: ${(e as Error).message}`, { file });
    }
    const r = FlightDumpSchema.safeParse(json);
    if (!r.success) throw new InvalidArgumentError(`${file} is not an Ascent flight-recorder dump (version 1):\n${formatIssues(r.error)}`, { file });
    out.push({ file, dump: r.data });
  }
  if (out.length === 0) throw new InvalidArgumentError(`No flight-recorder dumps (*.json) in ${path}.`);
  return out.sort((a, b) => a.dump.dumpedAtMs - b.dump.dumpedAtMs);
}

export function formatReport(rep: TraceReport): string {
  const lines = [
    `${rep.file}`,
    `  communicator ${rep.communicator} (${rep.nranks} ranks${rep.world ? '' : ', split from the world'}) aborted: ${rep.cause.code}${rep.cause.seq !== null ? ` at seq ${rep.cause.seq}` : ''}`,
    `  cause: ${rep.cause.message.split('\n')[0]}`,
  ];
  if (rep.findings.length === 0) lines.push('  no rank missed a collective and all fingerprints agree.');
  for (const f of rep.findings) lines.push(`  - ${f.kind}: ${f.text}`);
  return lines.join('\n');
}
