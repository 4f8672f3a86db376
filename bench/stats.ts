/** Small statistics helpers shared by the benchmark suites, and the result writer. */
import { saveResults } from './results.js';

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx]!;
}

/**
 * Writes a suite's results to a new `bench/results/<name>-<date>.json` with the run's
 * metadata (and a copy at `<name>-latest.json`); returns what was written, for the log line.
 */
export function writeResults(name: string, data: object): string {
  const w = saveResults(name, data as Record<string, unknown>);
  return `${w.path} (and ${w.latest})`;
}

export function round(x: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
