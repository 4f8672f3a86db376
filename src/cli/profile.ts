/**
 * `ascent profile <dir>`: the traces a run wrote under ASCENT_PROFILE=<dir> (one file per
 * rank, src/runtime/profiler.ts) merged into `<dir>/trace.json` — open it in
 * https://ui.perfetto.dev or chrome://tracing — and the top ops by total time over every
 * rank's streams, with the host waits and actor calls beside them.
 */
import { readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { InvalidArgumentError } from '../runtime/errors.js';
import type { TraceEvent } from '../runtime/profiler.js';

export interface OpSummary {
  name: string;
  cat: string;
  count: number;
  totalMs: number;
  meanUs: number;
  /** Share of all stream-op time (kernels, copies, collectives) over every rank. */
  share: number;
}

export interface ProfileSummary {
  files: string[];
  ranks: number[];
  ops: OpSummary[];
  /** Async spans (host waits, actor calls) by name: count and total ms. */
  spans: Array<{ name: string; cat: string; count: number; totalMs: number }>;
  events: number;
}

/** Reads every `*.trace.json` of `dir` (not a merged trace.json) and merges them. */
export function readTraces(dir: string): { files: string[]; events: TraceEvent[] } {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    throw new InvalidArgumentError(`ascent profile: cannot read ${dir}: ${(err as Error).message}. HINT: pass the folder given as ASCENT_PROFILE.`, {
      path: dir,
    });
  }
  const files = names.filter((n) => n.endsWith('.trace.json')).sort();
  if (files.length === 0)
    throw new InvalidArgumentError(`ascent profile: ${dir} holds no *.trace.json file. HINT: run with ASCENT_PROFILE=${dir} first.`, { path: dir });
  const events: TraceEvent[] = [];
  for (const f of files) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(join(dir, f), 'utf8'));
    } catch (err) {
      throw new InvalidArgumentError(`ascent profile: ${join(dir, f)} is not a trace file: ${(err as Error).message}.`, { path: join(dir, f) });
    }
    const list = (parsed as { traceEvents?: unknown }).traceEvents;
    if (!Array.isArray(list)) throw new InvalidArgumentError(`ascent profile: ${join(dir, f)} has no traceEvents array.`, { path: join(dir, f) });
    events.push(...(list as TraceEvent[]));
  }
  return { files, events };
}

export function summarize(files: string[], events: readonly TraceEvent[]): ProfileSummary {
  const ops = new Map<string, OpSummary>();
  let total = 0;
  const open = new Map<string, number>();
  const spans = new Map<string, { name: string; cat: string; count: number; totalMs: number }>();
  const ranks = new Set<number>();
  for (const e of events) {
    if (e.ph === 'M') continue;
    ranks.add(e.pid);
    if (e.ph === 'X') {
      const k = `${e.cat}\u0000${e.name}`;
      const o = ops.get(k) ?? { name: e.name, cat: e.cat, count: 0, totalMs: 0, meanUs: 0, share: 0 };
      o.count++;
      o.totalMs += (e.dur ?? 0) / 1000;
      total += (e.dur ?? 0) / 1000;
      ops.set(k, o);
    } else if (e.ph === 'b') open.set(`${e.pid}:${e.id}`, e.ts);
    else if (e.ph === 'e') {
      const t0 = open.get(`${e.pid}:${e.id}`);
      if (t0 === undefined) continue;
      open.delete(`${e.pid}:${e.id}`);
      const s = spans.get(e.name) ?? { name: e.name, cat: e.cat, count: 0, totalMs: 0 };
      s.count++;
      s.totalMs += (e.ts - t0) / 1000;
      spans.set(e.name, s);
    }
  }
  const list = [...ops.values()].map((o) => ({ ...o, meanUs: (o.totalMs * 1000) / o.count, share: total ? o.totalMs / total : 0 }));
  list.sort((a, b) => b.totalMs - a.totalMs);
  return { files, ranks: [...ranks].sort((a, b) => a - b), ops: list, spans: [...spans.values()].sort((a, b) => b.totalMs - a.totalMs), events: events.length };
}

/** Writes the merged trace to `<dir>/trace.json` (atomically) and returns the summary. */
export function mergeProfile(dir: string): ProfileSummary & { merged: string } {
  const { files, events } = readTraces(dir);
  const merged = join(dir, 'trace.json');
  const tmp = `${merged}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify({ traceEvents: events, displayTimeUnit: 'ms' }));
  renameSync(tmp, merged);
  return { ...summarize(files, events), merged };
}

export async function formatSummary(s: ProfileSummary & { merged: string }, top: number): Promise<string> {
  // cli-table3 is imported when a table is printed, not when `ascent` registers this command.
  const { default: Table } = await import('cli-table3');
  const t = new Table({
    head: ['op', 'kind', 'count', 'total ms', 'mean µs', 'share'],
    style: { head: [], border: [] },
    colAligns: ['left', 'left', 'right', 'right', 'right', 'right'],
  });
  for (const o of s.ops.slice(0, top)) t.push([o.name, o.cat, o.count, o.totalMs.toFixed(2), o.meanUs.toFixed(1), `${(o.share * 100).toFixed(1)}%`]);
  const h = new Table({ head: ['host span', 'kind', 'count', 'total ms'], style: { head: [], border: [] }, colAligns: ['left', 'left', 'right', 'right'] });
  for (const x of s.spans.slice(0, top)) h.push([x.name, x.cat, x.count, x.totalMs.toFixed(2)]);
  return [
    `${s.events} events from ${s.files.length} files (ranks ${s.ranks.map((r) => (r === 10_000 ? 'main' : String(r))).join(', ')}); merged trace: ${s.merged} (open it in https://ui.perfetto.dev)`,
    `Top ${Math.min(top, s.ops.length)} stream ops by total time over every rank:`,
    t.toString(),
    `Host waits and actor calls:`,
    h.toString(),
  ].join('\n');
}

export function registerProfile(program: Command): void {
  program
    .command('profile')
    .description('merge the traces of an ASCENT_PROFILE=<dir> run into <dir>/trace.json and print the top ops by time')
    .argument('<dir>', 'the folder given as ASCENT_PROFILE')
    .option('--top <n>', 'rows per table', '20')
    .option('--json', 'print the summary as JSON')
    .action(async (dir: string, opts: { top: string; json?: boolean }) => {
      const top = Number(opts.top);
      if (!Number.isInteger(top) || top < 1)
        throw new InvalidArgumentError(`ascent profile: --top must be a positive integer but is ${JSON.stringify(opts.top)}.`);
      const s = mergeProfile(dir);
      process.stdout.write(`${opts.json ? JSON.stringify(s, null, 2) : await formatSummary(s, top)}\n`);
    });
}
