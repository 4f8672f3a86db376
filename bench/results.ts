/**
 * Benchmark result files: `bench/results/<suite>-<UTC date and time>.json`, a new file
 * per run (a run never overwrites an earlier one), with the run's metadata (date,
 * commit, Node, CPU model, cores, load average), plus a copy at
 * `bench/results/<suite>-latest.json` (a copy, not a link, so it works on every file
 * system and survives moving the folder).
 */
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PACKAGE_ROOT, runMeta, type RunMeta } from '../src/internal.js';

export const RESULTS_DIR = join(PACKAGE_ROOT, 'bench', 'results');

/** `20261123-210405` for a date (UTC). */
export function stamp(d: Date): string {
  const iso = d.toISOString();
  return `${iso.slice(0, 10).replace(/-/g, '')}-${iso.slice(11, 19).replace(/:/g, '')}`;
}

export interface WrittenResults {
  path: string;
  latest: string;
  meta: RunMeta;
}

/**
 * Writes `{ suite, meta, ...data }` to a new file `<dir>/<suite>-<stamp>.json` (with
 * `-2`, `-3`, ... when two runs share a second) and copies it to `<suite>-latest.json`.
 */
export function saveResults(suite: string, data: Record<string, unknown>, dir: string = RESULTS_DIR): WrittenResults {
  mkdirSync(dir, { recursive: true });
  const meta = runMeta();
  const base = `${suite}-${stamp(new Date(meta.date))}`;
  let path = join(dir, `${base}.json`);
  for (let i = 2; existsSync(path); i++) path = join(dir, `${base}-${i}.json`);
  writeFileSync(path, `${JSON.stringify({ suite, meta, ...data }, null, 2)}\n`, { flag: 'wx' });
  const latest = join(dir, `${suite}-latest.json`);
  copyFileSync(path, latest);
  return { path, latest, meta };
}
