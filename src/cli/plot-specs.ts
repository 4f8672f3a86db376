/**
 * Vega-Lite specs of `ascent plot`'s figures, from data already read (plot-inputs.ts):
 * a GRPO run's curves per step (reward, KL, loss, entropy, clip fraction, phase times)
 * with several runs overlaid by colour, the collectives benchmark (busbw vs size per op,
 * against the STREAM-like copy bandwidth of the same run) and the kernels benchmark
 * (matmul GFLOP/s vs n: fast, reference, single-thread OpenBLAS). Every figure draws
 * a line per series and a point per value, so a figure's marks can be counted.
 */
import type { BenchInput, RunInput } from './plot-inputs.js';

export type VlSpec = Record<string, unknown>;

export interface Figure {
  /** File stem suffix, e.g. `reward`. */
  name: string;
  spec: VlSpec;
  /** Lines (series) and points the figure draws, for checks and the CLI's report. */
  series: number;
  points: number;
}

const SIZE = { width: 560, height: 300 };
const SCHEMA = 'https://vega.github.io/schema/vega-lite/v6.json';

export interface Point {
  x: number;
  y: number;
  /** Colour: the metric's series (a run, a phase, an op, a kernel). */
  series: string;
  /** Dash pattern: the run, when several runs overlay and colour already shows something else. */
  run?: string;
}

interface LineOptions {
  logX?: boolean;
  /** Log y (values over orders of magnitude: reference kernels vs fast ones). */
  logY?: boolean;
  /** Integer steps on x. */
  stepX?: boolean;
  /** Horizontal reference lines (the STREAM-like copy), one per run. */
  rules?: Array<{ y: number; label: string }>;
}

export function lineFigure(name: string, title: string, xTitle: string, yTitle: string, points: Point[], opts: LineOptions = {}): Figure {
  const x = {
    field: 'x',
    type: 'quantitative',
    title: xTitle,
    ...(opts.logX ? { scale: { type: 'log', base: 2 } } : {}),
    ...(opts.stepX ? { axis: { format: 'd', tickMinStep: 1 } } : {}),
  };
  const y = { field: 'y', type: 'quantitative', title: yTitle, ...(opts.logY ? { scale: { type: 'log' } } : {}) };
  const legend = { orient: 'bottom', columns: 2, labelLimit: 400 };
  const dashed = points.some((p) => p.run !== undefined);
  const encoding = {
    x,
    y,
    color: { field: 'series', type: 'nominal', title: null, legend },
    ...(dashed ? { strokeDash: { field: 'run', type: 'nominal', title: 'run', legend } } : {}),
  };
  const layer: VlSpec[] = [
    { mark: { type: 'line', strokeWidth: 1.5 }, encoding },
    {
      mark: { type: 'point', filled: true, size: 18 },
      encoding: { x, y, color: encoding.color, ...(dashed ? { detail: { field: 'run', type: 'nominal' } } : {}) },
    },
  ];
  (opts.rules ?? []).forEach((r, i) => {
    layer.push({
      data: { values: [r] },
      layer: [
        { mark: { type: 'rule', strokeDash: [6, 4], color: '#555' }, encoding: { y: { field: 'y', type: 'quantitative' } } },
        {
          mark: { type: 'text', align: 'left', dx: 4, dy: -6 - 12 * i, color: '#555', fontSize: 10 },
          encoding: { y: { field: 'y', type: 'quantitative' }, x: { value: 0 }, text: { field: 'label' } },
        },
      ],
    });
  });
  const series = new Set(points.map((p) => `${p.series}\u0000${p.run ?? ''}`)).size;
  return {
    name,
    spec: { $schema: SCHEMA, title, ...SIZE, data: { values: points }, layer, config: { font: 'sans-serif' } },
    series,
    points: points.length,
  };
}

/** A run metric's value at a step record: a number, or a field inside an object (`completionLength.mean`). */
function valueAt(rec: Record<string, unknown>, path: string): number | null {
  let v: unknown = rec;
  for (const k of path.split('.')) v = v && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined;
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

const RUN_METRICS: Array<{ name: string; field: string; title: string; y: string }> = [
  { name: 'reward', field: 'rewardMean', title: 'Mean reward per step', y: 'reward' },
  { name: 'kl', field: 'kl', title: 'KL to the reference per token', y: 'KL' },
  { name: 'loss', field: 'loss', title: 'GRPO loss', y: 'loss' },
  { name: 'entropy', field: 'entropy', title: 'Policy entropy per token (sampled-token estimate)', y: 'nats' },
  { name: 'entropy-exact', field: 'entropyExact', title: 'Policy entropy per token (exact, over the vocabulary)', y: 'nats' },
  { name: 'clip', field: 'clipFraction', title: 'Clip fraction', y: 'fraction of tokens' },
  { name: 'completion-length', field: 'completionLength.mean', title: 'Mean completion length', y: 'tokens' },
];

/** The run figures: one per metric any run logged, runs overlaid; phase times per phase and run. */
export function runFigures(runs: readonly RunInput[]): Figure[] {
  const figs: Figure[] = [];
  for (const m of RUN_METRICS) {
    const pts: Point[] = [];
    for (const r of runs) {
      for (const s of r.steps) {
        const y = valueAt(s, m.field);
        if (y !== null) pts.push({ x: s.step, y, series: r.label });
      }
    }
    if (pts.length) figs.push(lineFigure(m.name, m.title, 'step', m.y, pts, { stepX: true }));
  }
  const phasePts: Point[] = [];
  for (const r of runs) {
    for (const s of r.steps) {
      const secs = s.seconds;
      if (!secs || typeof secs !== 'object') continue;
      for (const [phase, v] of Object.entries(secs as Record<string, unknown>)) {
        if (typeof v === 'number' && Number.isFinite(v)) phasePts.push({ x: s.step, y: v, series: phase, ...(runs.length > 1 ? { run: r.label } : {}) });
      }
    }
  }
  if (phasePts.length) figs.push(lineFigure('phases', 'Time per phase per step', 'step', 'seconds', phasePts, { stepX: true }));
  return figs;
}

const OP_ORDER = ['allReduce', 'allGather', 'reduceScatter', 'broadcast', 'allToAll'];

/** busbw vs size per op (out-of-place rows), each run's STREAM-like copy as a rule. */
export function collectivesFigure(runs: readonly BenchInput[]): Figure {
  const pts: Point[] = [];
  const rules: Array<{ y: number; label: string }> = [];
  for (const r of runs) {
    for (const row of r.rows) {
      if (row.inPlace === true) continue;
      const bytes = Number(row.bytes),
        busbw = Number(row.busbwGBs);
      if (!Number.isFinite(bytes) || !Number.isFinite(busbw)) continue;
      pts.push({ x: bytes, y: busbw, series: String(row.op), ...(runs.length > 1 ? { run: r.label } : {}) });
    }
    const stream = Number((r.data.baselines as Record<string, unknown> | undefined)?.streamCopyGBs);
    if (Number.isFinite(stream)) rules.push({ y: stream, label: `STREAM-like copy${runs.length > 1 ? ` (${r.label})` : ''}: ${stream.toFixed(1)} GB/s` });
  }
  pts.sort((a, b) => OP_ORDER.indexOf(a.series) - OP_ORDER.indexOf(b.series));
  const ranks = runs[0]?.rows[0]?.ranks;
  return lineFigure('busbw', `Collectives: bus bandwidth vs size${ranks ? ` (${String(ranks)} ranks)` : ''}`, 'size (bytes)', 'busbw (GB/s)', pts, {
    logX: true,
    rules,
  });
}

/** Matmul GFLOP/s vs n: fast and reference per dtype, and single-thread OpenBLAS where measured. */
export function kernelsFigure(runs: readonly BenchInput[]): Figure {
  const pts: Point[] = [];
  for (const r of runs) {
    for (const row of r.rows) {
      if (row.kernel !== 'matmul') continue;
      const n = Number(row.n);
      const add = (what: string, v: unknown) => {
        if (typeof v === 'number' && Number.isFinite(v)) pts.push({ x: n, y: v, series: what, ...(runs.length > 1 ? { run: r.label } : {}) });
      };
      add(`fast ${String(row.dtype)}`, row.fastGflops);
      add(`reference ${String(row.dtype)}`, row.referenceGflops);
      add(`OpenBLAS ${String(row.dtype)} (1 thread)`, row.openblasGflops);
    }
  }
  return lineFigure('matmul', 'Matmul throughput vs n (one thread)', 'n (square n x n x n)', 'GFLOP/s (log scale)', pts, { logX: true, logY: true });
}
