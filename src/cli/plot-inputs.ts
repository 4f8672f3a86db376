/**
 * What `ascent plot` reads: GRPO run logs (JSONL, see src/grpo/run-log.ts) and
 * benchmark result files (bench/results/<suite>-<date>.json). Each input is classified
 * by its content; anything else is an error saying what the command reads.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, extname } from 'node:path';
import { InvalidArgumentError } from '../runtime/errors.js';
import { readRunLog, type RunLogHeader, type RunLogRecord } from '../grpo/run-log.js';

export interface RunInput {
  kind: 'run';
  path: string;
  label: string;
  headers: RunLogHeader[];
  steps: RunLogRecord[];
}

export interface BenchInput {
  kind: 'bench';
  path: string;
  label: string;
  suite: string;
  data: Record<string, unknown>;
  rows: Array<Record<string, unknown>>;
}

export type PlotInput = RunInput | BenchInput;

/** Suites with a figure. */
export const PLOTTED_SUITES = ['collectives', 'kernels'];

const WHAT =
  'ascent plot reads GRPO run logs (--log run.jsonl) and benchmark results of the collectives and kernels suites (bench/results/<suite>-<date>.json)';

function stem(path: string): string {
  return basename(path, extname(path));
}

/** One input, from its text when the caller already read it (each file is read once). */
export function readPlotInput(path: string, text?: string): PlotInput {
  if (text === undefined) {
    if (!existsSync(path) || !statSync(path).isFile()) throw new InvalidArgumentError(`${path}: no such file. HINT: ${WHAT}.`, { path });
    text = readFileSync(path, 'utf8');
  }
  let whole: unknown;
  try {
    whole = JSON.parse(text);
  } catch {
    whole = undefined; // JSONL (or not JSON at all): read as a run log below.
  }
  if (whole !== undefined && !(typeof whole === 'object' && whole !== null && ('type' in whole || 'step' in whole))) {
    const data = whole as Record<string, unknown>;
    const suite = typeof data?.suite === 'string' ? data.suite : null;
    if (!suite) throw new InvalidArgumentError(`${path} is JSON but neither a run log nor a benchmark result (no "suite" field). HINT: ${WHAT}.`, { path });
    if (!PLOTTED_SUITES.includes(suite)) {
      throw new InvalidArgumentError(`${path} holds results of the ${suite} suite, which has no figure; figures exist for ${PLOTTED_SUITES.join(' and ')}.`, {
        path,
        suite,
      });
    }
    const rows = Array.isArray(data.rows) ? (data.rows as Array<Record<string, unknown>>) : [];
    if (rows.length === 0) throw new InvalidArgumentError(`${path}: the ${suite} results have no rows to draw.`, { path, suite });
    return { kind: 'bench', path, label: stem(path), suite, data, rows };
  }
  let log;
  try {
    log = readRunLog(path, text);
  } catch (e) {
    throw new InvalidArgumentError(`${(e as Error).message} HINT: ${WHAT}.`, { path });
  }
  if (log.steps.length === 0) throw new InvalidArgumentError(`${path}: the run log has a header but no step records yet; nothing to draw.`, { path });
  return { kind: 'run', path, label: stem(path), headers: log.headers, steps: log.steps };
}

/**
 * Reads every input. A file identical to an earlier input is skipped (`<suite>-*.json`
 * also matches `<suite>-latest.json`, a copy of the newest run); labels that repeat
 * (same file name in two folders) get a number.
 */
export function readPlotInputs(paths: readonly string[]): PlotInput[] {
  const contents = new Set<string>();
  const inputs: PlotInput[] = [];
  for (const p of paths) {
    if (!existsSync(p) || !statSync(p).isFile()) throw new InvalidArgumentError(`${p}: no such file. HINT: ${WHAT}.`, { path: p });
    const text = readFileSync(p, 'utf8');
    if (contents.has(text)) continue;
    contents.add(text);
    inputs.push(readPlotInput(p, text));
  }
  const seen = new Map<string, number>();
  for (const inp of inputs) {
    const n = (seen.get(inp.label) ?? 0) + 1;
    seen.set(inp.label, n);
    if (n > 1) inp.label = `${inp.label} (${n})`;
  }
  return inputs;
}
