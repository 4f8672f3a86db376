/**
 * `ascent plot <file...> [--out dir] [--format svg,png]`: figures of GRPO run logs
 * (reward, KL, loss, entropy, clip fraction, completion length and phase times per
 * step; several runs overlaid) and of benchmark results (collectives: busbw vs size
 * against the STREAM-like copy; kernels: matmul GFLOP/s vs n against OpenBLAS; several
 * result files overlaid), written as SVG and PNG. `--groups` draws one mean reward curve
 * per folder of run logs instead (seeds of one variant averaged; plot-groups.ts).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { InvalidArgumentError } from '../runtime/errors.js';
import { readPlotInputs, type BenchInput, type RunInput } from './plot-inputs.js';
import { collectivesFigure, kernelsFigure, runFigures, type Figure } from './plot-specs.js';
import { groupByFolder, groupRewardFigure } from './plot-groups.js';

export type PlotFormat = 'svg' | 'png';

export interface PlotOptions {
  out: string;
  formats: PlotFormat[];
  /** File-name prefix (default: the first input's file name). */
  name?: string;
  /** Run logs: one mean reward curve per folder (its runs averaged per step) instead of a line per run. */
  groups?: boolean;
  /** With `groups`: a trailing mean over this many steps (default 1: the per-step mean). */
  smooth?: number;
}

export interface WrittenFigure {
  figure: string;
  series: number;
  points: number;
  files: string[];
}

/** The figures for these inputs: runs together, and each benchmark suite together. */
export function figuresFor(paths: readonly string[], opts: Pick<PlotOptions, 'groups' | 'smooth'> = {}): Array<{ prefix: string; figure: Figure }> {
  if (opts.smooth !== undefined && !opts.groups) {
    throw new InvalidArgumentError('ascent plot: --smooth applies to the --groups curves only. HINT: add --groups (one mean curve per folder of run logs).');
  }
  const inputs = readPlotInputs(paths);
  const out: Array<{ prefix: string; figure: Figure }> = [];
  const runs = inputs.filter((i): i is RunInput => i.kind === 'run');
  if (opts.groups && runs.length === 0) {
    throw new InvalidArgumentError(
      'ascent plot: --groups averages GRPO run logs, and none was given. HINT: pass the run logs (--log run.jsonl), one folder per variant.',
    );
  }
  if (runs.length && opts.groups) out.push({ prefix: 'groups', figure: groupRewardFigure(groupByFolder(runs), opts.smooth ?? 1) });
  else if (runs.length) for (const figure of runFigures(runs)) out.push({ prefix: runs[0]!.label, figure });
  const bench = inputs.filter((i): i is BenchInput => i.kind === 'bench');
  for (const suite of [...new Set(bench.map((b) => b.suite))]) {
    const group = bench.filter((b) => b.suite === suite);
    out.push({ prefix: suite, figure: suite === 'collectives' ? collectivesFigure(group) : kernelsFigure(group) });
  }
  return out;
}

export async function plot(paths: readonly string[], opts: PlotOptions): Promise<WrittenFigure[]> {
  if (paths.length === 0) throw new InvalidArgumentError('ascent plot: give at least one run log (.jsonl) or benchmark result (.json).');
  const figures = figuresFor(paths, opts);
  // vega, vega-lite and resvg take about a second to load: only `ascent plot` pays for them, not every ascent command.
  const { renderSvg, svgToPng } = await import('./plot-render.js');
  mkdirSync(opts.out, { recursive: true });
  const written: WrittenFigure[] = [];
  for (const { prefix, figure } of figures) {
    const base = join(opts.out, `${(opts.name ?? prefix).replace(/[^\w.+-]+/g, '_')}-${figure.name}`);
    const svg = await renderSvg(figure.spec);
    const files: string[] = [];
    if (opts.formats.includes('svg')) {
      writeFileSync(`${base}.svg`, svg);
      files.push(`${base}.svg`);
    }
    if (opts.formats.includes('png')) {
      writeFileSync(`${base}.png`, svgToPng(svg));
      files.push(`${base}.png`);
    }
    written.push({ figure: figure.name, series: figure.series, points: figure.points, files });
  }
  return written;
}

function parseFormats(v: string): PlotFormat[] {
  const list = v
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean);
  const bad = list.filter((f) => f !== 'svg' && f !== 'png');
  if (list.length === 0 || bad.length) throw new InvalidArgumentError(`ascent plot: --format takes svg, png or svg,png; got ${JSON.stringify(v)}.`);
  return list as PlotFormat[];
}

function parseSmooth(v: string): number {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || n < 1) throw new InvalidArgumentError(`ascent plot: --smooth takes a whole number of steps >= 1; got ${JSON.stringify(v)}.`);
  return n;
}

export function registerPlot(program: Command): void {
  program
    .command('plot')
    .description('draw GRPO run logs (reward, KL, loss, phase times; runs overlaid) and collectives / kernels benchmark results to SVG and PNG')
    .argument('<files...>', 'run logs (--log run.jsonl) and/or bench/results/<suite>-<date>.json files')
    .option('--out <dir>', 'folder for the figures', 'plots')
    .option('--format <list>', 'svg, png or svg,png', 'svg,png')
    .option('--name <prefix>', "file-name prefix (default: the first input's name, or the suite)")
    .option('--groups', 'run logs: one mean reward curve per folder (e.g. one folder per variant, a log per seed)')
    .option('--smooth <n>', 'with --groups: trailing mean over n steps', parseSmooth)
    .action(async (files: string[], o: { out: string; format: string; name?: string; groups?: boolean; smooth?: number }) => {
      const written = await plot(files, {
        out: o.out,
        formats: parseFormats(o.format),
        ...(o.name ? { name: o.name } : {}),
        ...(o.groups ? { groups: true } : {}),
        ...(o.smooth !== undefined ? { smooth: o.smooth } : {}),
      });
      for (const w of written) process.stdout.write(`${w.figure}: ${w.series} series, ${w.points} points -> ${w.files.join(', ')}\n`);
    });
}
