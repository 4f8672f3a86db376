/**
 * `ascent plot --groups`: several runs of one configuration (seeds) as one curve. Runs
 * whose logs share a folder form a group (`runs/<variant>/s0.jsonl`, `s1.jsonl`, ...);
 * each group draws the mean reward per step over its runs, optionally as a trailing
 * mean over `smooth` steps, so a table of variants and its figure read the same numbers.
 */
import { basename, dirname, resolve } from 'node:path';
import { InvalidArgumentError } from '../runtime/errors.js';
import type { RunInput } from './plot-inputs.js';
import { lineFigure, type Figure, type Point } from './plot-specs.js';

export interface RunGroup {
  label: string;
  runs: RunInput[];
}

/** Runs grouped by their log's folder, in the order the folders first appear; a repeated folder name gets a number. */
export function groupByFolder(runs: readonly RunInput[]): RunGroup[] {
  const byDir = new Map<string, RunInput[]>();
  for (const r of runs) {
    const dir = dirname(resolve(r.path));
    byDir.set(dir, [...(byDir.get(dir) ?? []), r]);
  }
  const seen = new Map<string, number>();
  return [...byDir].map(([dir, rs]) => {
    const name = basename(dir);
    const n = (seen.get(name) ?? 0) + 1;
    seen.set(name, n);
    return { label: n > 1 ? `${name} (${n})` : name, runs: rs };
  });
}

/** Mean reward per step over a group's runs, at the steps every run of the group logged (the last record of a step wins). */
export function meanRewardPerStep(group: RunGroup): Array<{ step: number; reward: number }> {
  const perRun = group.runs.map((r) => {
    const m = new Map<number, number>();
    for (const s of r.steps) if (typeof s.rewardMean === 'number' && Number.isFinite(s.rewardMean)) m.set(s.step, s.rewardMean);
    return m;
  });
  const steps = [...perRun[0]!.keys()].filter((s) => perRun.every((m) => m.has(s))).sort((a, b) => a - b);
  return steps.map((step) => ({ step, reward: perRun.reduce((x, m) => x + m.get(step)!, 0) / perRun.length }));
}

/** Trailing mean over `window` values (the first ones average what there is so far). */
export function trailingMean(values: readonly number[], window: number): number[] {
  return values.map((_, i) => {
    const from = Math.max(0, i - window + 1);
    return values.slice(from, i + 1).reduce((x, y) => x + y, 0) / (i + 1 - from);
  });
}

/** One reward curve per group: the mean over its runs, smoothed over `smooth` steps (1: raw). */
export function groupRewardFigure(groups: readonly RunGroup[], smooth = 1): Figure {
  if (!Number.isInteger(smooth) || smooth < 1) {
    throw new InvalidArgumentError(
      `ascent plot: --smooth takes a whole number of steps >= 1; got ${String(smooth)}. HINT: --smooth 8 averages the last 8 steps.`,
    );
  }
  const pts: Point[] = [];
  for (const g of groups) {
    const curve = meanRewardPerStep(g);
    if (curve.length === 0) {
      throw new InvalidArgumentError(
        `ascent plot --groups: the runs in ${g.label} share no step with a reward. HINT: group runs of the same length, one folder per variant.`,
      );
    }
    const ys = trailingMean(
      curve.map((c) => c.reward),
      smooth,
    );
    const series = `${g.label} (${g.runs.length} run${g.runs.length === 1 ? '' : 's'})`;
    curve.forEach((c, i) => pts.push({ x: c.step, y: ys[i]!, series }));
  }
  const how = smooth > 1 ? `, trailing mean over ${smooth} steps` : '';
  return lineFigure('reward-groups', `Mean reward per step over each folder's runs${how}`, 'step', 'reward', pts, { stepX: true });
}
