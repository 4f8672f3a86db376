/**
 * The GRPO run log: a JSONL file whose first line is a header (run id, the whole
 * config, Ascent and Node versions, the git commit when the package is a checkout,
 * host and load) and then one `step` record per step.
 *
 * It never appends to an older run silently. Opening a file that already holds
 * records is an error unless
 *   - the run resumes (`resume`): the records are appended after a new header line
 *     with `resumed: true`, the same run id and the step it resumed from (records of
 *     steps after that step written before the resume are superseded by the new
 *     ones; readers keep the last record of each step), or
 *   - the config says to overwrite it (`logOverwrite`, flag `--log-overwrite`).
 */
import { appendFileSync, existsSync, mkdirSync, readFileSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { dirname } from 'node:path';
import { ConfigError, InvalidArgumentError } from '../runtime/errors.js';
import { runMeta, type RunMeta } from '../runtime/actor-system/run-meta.js';

export const RUN_LOG_FORMAT = 'ascent.grpo.log/1';

export type RunLogMode = 'new' | 'resume' | 'overwrite';

export interface RunLogHeader extends RunMeta {
  type: 'header';
  format: typeof RUN_LOG_FORMAT;
  runId: string;
  /** True on the header a resumed run appends. */
  resumed: boolean;
  /** Steps already done when this header was written (0 for a new run). */
  startStep: number;
  config: unknown;
}

export interface RunLogRecord {
  type: 'step';
  step: number;
  [key: string]: unknown;
}

/** How to open the log for a run's flags; resume and overwrite together are a contradiction. */
export function runLogMode(opts: { resume?: boolean; logOverwrite?: boolean }): RunLogMode {
  if (opts.resume && opts.logOverwrite) {
    throw new ConfigError(
      'GRPO: resume appends to the run log and logOverwrite replaces it; choose one. HINT: drop --log-overwrite to continue the run in the same log, or drop --resume to start over.',
    );
  }
  return opts.resume ? 'resume' : opts.logOverwrite ? 'overwrite' : 'new';
}

function parseLines(path: string, text: string): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  const lines = text.split('\n');
  lines.forEach((line, i) => {
    if (line.trim() === '') return;
    try {
      const v = JSON.parse(line) as unknown;
      if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not a JSON object');
      out.push(v as Record<string, unknown>);
    } catch (e) {
      // A run killed while writing leaves a partial last line; anything else is not a run log.
      if (i === lines.length - 1 && !text.endsWith('\n')) return;
      throw new InvalidArgumentError(`${path}:${i + 1} is not a JSON object (${(e as Error).message}); a GRPO run log has one JSON object per line.`, {
        path,
        line: i + 1,
      });
    }
  });
  return out;
}

function isJsonObjectLine(line: string): boolean {
  try {
    const v = JSON.parse(line) as unknown;
    return typeof v === 'object' && v !== null && !Array.isArray(v);
  } catch {
    return false;
  }
}

/** Whether the file exists with anything in it. */
function holdsRecords(path: string): boolean {
  return existsSync(path) && statSync(path).size > 0;
}

/**
 * Checks that a run may write `path` in this mode (before the run spends time on
 * setup): a new run refuses a file that already holds records.
 */
export function checkRunLogTarget(path: string, mode: RunLogMode): void {
  if (mode !== 'new' || !holdsRecords(path)) return;
  let what = 'records';
  try {
    const recs = parseLines(path, readFileSync(path, 'utf8'));
    const header = recs.find((r) => r.type === 'header');
    const steps = recs.filter((r) => r.type === 'step' || (r.type === undefined && typeof r.step === 'number')).length;
    what = header ? `run ${String(header.runId)} (${steps} step records)` : `${recs.length} records`;
  } catch {
    // Not a run log at all: the message below still applies.
  }
  throw new ConfigError(
    `GRPO: the log ${path} already holds ${what}; a new run does not append to an older run's log. HINT: pass --log with a new file, --log-overwrite to replace it, or --resume (with --checkpoint-dir) to continue that run in the same log.`,
    { path },
  );
}

export class RunLog {
  private constructor(
    readonly path: string,
    readonly header: RunLogHeader,
  ) {}

  /** Opens the log for a run (see the module comment) and writes its header line. */
  static open(path: string, opts: { mode: RunLogMode; config: unknown; startStep: number }): RunLog {
    checkRunLogTarget(path, opts.mode);
    mkdirSync(dirname(path), { recursive: true });
    let runId: string | null = null;
    let prefix = '';
    if (opts.mode === 'resume' && holdsRecords(path)) {
      const text = readFileSync(path, 'utf8');
      const recs = parseLines(path, text);
      const last = [...recs].reverse().find((r) => r.type === 'header');
      if (!last && !recs.some((r) => typeof r.step === 'number')) {
        throw new ConfigError(
          `GRPO: --resume would append to ${path}, which is not a GRPO run log (no header and no step records). HINT: pass --log with the run's own log file.`,
          { path },
        );
      }
      runId = last ? String(last.runId) : null;
      if (!text.endsWith('\n')) {
        // A run killed mid-write left a partial last line: drop it, or it would sit in the middle of the log.
        const cut = text.lastIndexOf('\n') + 1;
        if (isJsonObjectLine(text.slice(cut))) prefix = '\n';
        else truncateSync(path, Buffer.byteLength(text.slice(0, cut)));
      }
    }
    const header: RunLogHeader = {
      type: 'header',
      format: RUN_LOG_FORMAT,
      runId: runId ?? `${new Date().toISOString().slice(0, 19).replace(/[-:]/g, '')}-${randomUUID().slice(0, 8)}`,
      resumed: opts.mode === 'resume',
      startStep: opts.startStep,
      ...runMeta(),
      config: opts.config,
    };
    const line = `${prefix}${JSON.stringify(header)}\n`;
    if (opts.mode === 'resume') appendFileSync(path, line);
    else writeFileSync(path, line);
    return new RunLog(path, header);
  }

  /** Appends one evaluation record (held-out prompts), kept apart from the step records. */
  eval(record: { step: number } & Record<string, unknown>): void {
    appendFileSync(this.path, `${JSON.stringify({ type: 'eval', ...record })}\n`);
  }

  /** Appends one step record: the step's metrics and any further fields. */
  step(record: { step: number } & Record<string, unknown>): void {
    appendFileSync(this.path, `${JSON.stringify({ type: 'step', ...record })}\n`);
  }
}

export interface RunLogContents {
  headers: RunLogHeader[];
  /** The last record of each step, in step order (a resumed run's records replace the older ones). */
  steps: RunLogRecord[];
  /** Evaluation records, the last of each step, in step order. */
  evals: RunLogRecord[];
}

/** Reads a run log; logs written before the header existed (step records only) read too. */
export function readRunLog(path: string, text: string = readFileSync(path, 'utf8')): RunLogContents {
  const recs = parseLines(path, text);
  const headers = recs.filter((r) => r.type === 'header') as unknown as RunLogHeader[];
  const byStep = new Map<number, RunLogRecord>();
  for (const r of recs) {
    if ((r.type === 'step' || r.type === undefined) && typeof r.step === 'number') byStep.set(r.step, { ...r, type: 'step' } as RunLogRecord);
  }
  if (headers.length === 0 && byStep.size === 0) {
    throw new InvalidArgumentError(`${path} has no GRPO header and no step records; it is not a GRPO run log (write one with --log run.jsonl).`, { path });
  }
  const evals = new Map<number, RunLogRecord>();
  for (const r of recs) if (r.type === 'eval' && typeof r.step === 'number') evals.set(r.step, r as RunLogRecord);
  return { headers, steps: [...byStep.values()].sort((a, b) => a.step - b.step), evals: [...evals.values()].sort((a, b) => a.step - b.step) };
}
