/**
 * `ascent plot <file...> [--out dir] [--format svg,png]`: figures of GRPO run logs
 * (reward, KL, loss, entropy, clip fraction, completion length and phase times per
 * step; several runs overlaid) and of benchmark results (collectives: busbw vs size
 * against the STREAM-like copy; kernels: matmul GFLOP/s vs n against OpenBLAS; several
 * result files overlaid), written as SVG and PNG.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { InvalidArgumentError } from '../runtime/errors.js';
import { readPlotInputs, type BenchInput, type RunInput } from './plot-inputs.js';
import { renderSvg, svgToPng } from './plot-render.js';
import { collectivesFigure, kernelsFigure, runFigures, type Figure } from './plot-specs.js';

export type PlotFormat = 'svg' | 'png';

export interface PlotOptions {
  out: string;
  formats: PlotFormat[];
  /** File-name prefix (default: the first input's file name). */
  name?: string;
}

export interface WrittenFigure {
  figure: string;
  series: number;
  points: number;
  files: string[];
}

/** The figures for these inputs: runs together, and each benchmark suite together. */
export function figuresFor(paths: readonly string[]): Array<{ prefix: string; figure: Figure }> {
  const inputs = readPlotInputs(paths);
  const out: Array<{ prefix: string; figure: Figure }> = [];
  const runs = inputs.filter((i): i is RunInput => i.kind === 'run');
  if (runs.length) for (const figure of runFigures(runs)) out.push({ prefix: runs[0]!.label, figure });
  const bench = inputs.filter((i): i is BenchInput => i.kind === 'bench');
  for (const suite of [...new Set(bench.map((b) => b.suite))]) {
    const group = bench.filter((b) => b.suite === suite);
    out.push({ prefix: suite, figure: suite === 'collectives' ? collectivesFigure(group) : kernelsFigure(group) });
  }
  return out;
}

export async function plot(paths: readonly string[], opts: PlotOptions): Promise<WrittenFigure[]> {
  if (paths.length === 0) throw new InvalidArgumentError('ascent plot: give at least one run log (.jsonl) or benchmark result (.json).');
  const figures = figuresFor(paths);
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

export function registerPlot(program: Command): void {
  program
    .command('plot')
    .description('draw GRPO run logs (reward, KL, loss, phase times; runs overlaid) and collectives / kernels benchmark results to SVG and PNG')
    .argument('<files...>', 'run logs (--log run.jsonl) and/or bench/results/<suite>-<date>.json files')
    .option('--out <dir>', 'folder for the figures', 'plots')
    .option('--format <list>', 'svg, png or svg,png', 'svg,png')
    .option('--name <prefix>', "file-name prefix (default: the first input's name, or the suite)")
    .action(async (files: string[], o: { out: string; format: string; name?: string }) => {
      const written = await plot(files, { out: o.out, formats: parseFormats(o.format), ...(o.name ? { name: o.name } : {}) });
      for (const w of written) process.stdout.write(`${w.figure}: ${w.series} series, ${w.points} points -> ${w.files.join(', ')}\n`);
    });
}
