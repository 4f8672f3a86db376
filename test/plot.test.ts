/**
 * `ascent plot`: the SVG and PNG files are produced and valid (the SVG parses as XML,
 * the PNG decodes), and the figures hold the data: one line per run (or per op /
 * kernel series and run) and one point per value.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import { PNG } from 'pngjs';
import { RunLog } from '../src/grpo/run-log.js';
import { plot } from '../src/cli/plot.js';
import { groupByFolder, groupRewardFigure, meanRewardPerStep, trailingMean } from '../src/cli/plot-groups.js';
import { readPlotInputs, type RunInput } from '../src/cli/plot-inputs.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'ascent-plot-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function writeRun(name: string, steps: number, seed: number, rewardOf = (s: number) => 0.1 * s + seed): string {
  const p = join(dir, `${name}.jsonl`);
  mkdirSync(dirname(p), { recursive: true });
  const log = RunLog.open(p, { mode: 'new', config: { seed }, startStep: 0 });
  for (let s = 1; s <= steps; s++) {
    log.step({
      step: s,
      lr: 1e-3,
      rewardMean: rewardOf(s),
      rewardStd: 0.1,
      rewards: { reverse_digits: rewardOf(s) },
      kl: 0.001 * s,
      clipFraction: 0.05,
      entropy: 2 - 0.1 * s,
      loss: 1 / s,
      completionLength: { mean: 8, min: 2, max: 12 },
      seconds: { generate: 0.3, reward: 0.01, logprob: 0.1, train: 0.4, sync: 0.1 },
      syncBytes: 1 << 20,
    });
  }
  return p;
}

interface SvgNode {
  [k: string]: unknown;
}

/** Every `<g>` whose class has `mark-<kind> role-mark`, with the number of its direct <path> (or <line>, for rules) children. */
function markGroups(svg: string, kind: string): number[] {
  expect(XMLValidator.validate(svg)).toBe(true);
  const child = kind === 'rule' ? 'line' : 'path';
  const doc = new XMLParser({ ignoreAttributes: false, attributeNamePrefix: '@', isArray: (name) => name === 'g' || name === child }).parse(svg) as SvgNode;
  const out: number[] = [];
  const walk = (n: unknown) => {
    if (Array.isArray(n)) return n.forEach(walk);
    if (!n || typeof n !== 'object') return;
    const node = n as SvgNode;
    const cls = String(node['@class'] ?? '');
    if (cls.includes(`mark-${kind} role-mark`)) out.push(((node[child] as unknown[]) ?? []).length);
    for (const [k, v] of Object.entries(node)) if (!k.startsWith('@')) walk(v);
  };
  walk(doc);
  return out;
}

function decodePng(path: string): { width: number; height: number; colored: number } {
  const png = PNG.sync.read(readFileSync(path));
  let colored = 0;
  for (let i = 0; i < png.data.length; i += 4) {
    const [r, g, b] = [png.data[i]!, png.data[i + 1]!, png.data[i + 2]!];
    if (Math.max(r, g, b) - Math.min(r, g, b) > 60) colored++; // a line's colour, not white / grey / black
  }
  return { width: png.width, height: png.height, colored };
}

describe('ascent plot', () => {
  it('run logs: one figure per curve, each run a line with a point per step, in SVG and PNG', async () => {
    const a = writeRun('run-a', 4, 0);
    const b = writeRun('run-b', 6, 1);
    const out = join(dir, 'runs');
    const written = await plot([a, b], { out, formats: ['svg', 'png'] });
    expect(written.map((w) => w.figure)).toEqual(['reward', 'kl', 'loss', 'entropy', 'clip', 'completion-length', 'phases']);
    for (const w of written) {
      const svg = readFileSync(join(out, `run-a-${w.figure}.svg`), 'utf8');
      const lines = markGroups(svg, 'line').reduce((x, y) => x + y, 0);
      const points = markGroups(svg, 'symbol').reduce((x, y) => x + y, 0);
      if (w.figure === 'phases') {
        expect(lines).toBe(5 * 2); // 5 phases x 2 runs
        expect(points).toBe(5 * (4 + 6));
      } else {
        expect(lines, w.figure).toBe(2);
        expect(points, w.figure).toBe(4 + 6);
      }
      const png = decodePng(join(out, `run-a-${w.figure}.png`));
      expect(png.width).toBeGreaterThan(400);
      expect(png.height).toBeGreaterThan(200);
      expect(png.colored, w.figure).toBeGreaterThan(100);
    }
  }, 60_000);

  it('--groups: one mean reward curve per folder of runs (seeds averaged per step), optionally smoothed', async () => {
    // Variant A: two seeds, 5 and 4 steps (only the shared steps 1-4 are averaged); variant B: one seed.
    const a0 = writeRun('groups/A/s0', 5, 0, (s) => s / 10);
    const a1 = writeRun('groups/A/s1', 4, 1, (s) => s / 10 + 0.2);
    const b0 = writeRun('groups/B/s0', 4, 0, () => 0.5);
    const groups = groupByFolder(readPlotInputs([a0, a1, b0]) as RunInput[]);
    expect(groups.map((g) => [g.label, g.runs.length])).toEqual([
      ['A', 2],
      ['B', 1],
    ]);
    const curve = meanRewardPerStep(groups[0]!);
    expect(curve.map((c) => c.step)).toEqual([1, 2, 3, 4]);
    curve.forEach((c) => expect(c.reward).toBeCloseTo(c.step / 10 + 0.1, 12));
    expect(trailingMean([1, 2, 3, 4], 2)).toEqual([1, 1.5, 2.5, 3.5]);
    const fig = groupRewardFigure(groups, 2);
    expect(fig).toMatchObject({ name: 'reward-groups', series: 2, points: 8 });
    const ys = (fig.spec.data as { values: Array<{ series: string; y: number }> }).values.filter((p) => p.series === 'A (2 runs)').map((p) => p.y);
    expect(ys[3]).toBeCloseTo((0.4 + 0.5) / 2, 12); // steps 3 and 4 of the mean curve
    const out = join(dir, 'groups-out');
    const [w] = await plot([a0, a1, b0], { out, formats: ['svg', 'png'], groups: true, smooth: 2 });
    expect(w).toMatchObject({ figure: 'reward-groups', series: 2, points: 8 });
    const svg = readFileSync(join(out, 'groups-reward-groups.svg'), 'utf8');
    expect(markGroups(svg, 'line').reduce((x, y) => x + y, 0)).toBe(2);
    expect(markGroups(svg, 'symbol').reduce((x, y) => x + y, 0)).toBe(8);
    expect(svg).toContain('B (1 run)');
    expect(decodePng(join(out, 'groups-reward-groups.png')).colored).toBeGreaterThan(100);
    await expect(plot([a0], { out, formats: ['svg'], smooth: 2 })).rejects.toThrow(/--smooth applies to the --groups curves only/);
    expect(() => groupRewardFigure(groups, 0)).toThrow(/--smooth takes a whole number of steps >= 1; got 0/);
    const cli = spawnSync(process.execPath, ['bin/ascent.mjs', 'plot', a0, b0, '--groups', '--smooth', 'x', '--out', out], { encoding: 'utf8' });
    expect(cli.status).toBe(1);
    expect(cli.stderr).toMatch(/--smooth takes a whole number of steps >= 1; got "x"/);
  }, 180_000);

  it('collectives results: busbw vs size per op, the STREAM-like copy as a rule; two result files overlay', async () => {
    const result = (stream: number, scale: number) => ({
      suite: 'collectives',
      baselines: { streamCopyGBs: stream },
      rows: ['allReduce', 'allGather'].flatMap((op) =>
        [1024, 65536, 4194304].flatMap((bytes) =>
          [false, true].map((inPlace) => ({ op, inPlace, ranks: 4, bytes, busbwGBs: (scale * Math.log2(bytes)) / 10 })),
        ),
      ),
    });
    const r1 = join(dir, 'collectives-1.json'),
      r2 = join(dir, 'collectives-2.json');
    writeFileSync(r1, JSON.stringify(result(30, 1)));
    writeFileSync(r2, JSON.stringify(result(25, 0.8)));
    const out = join(dir, 'bench');
    const [one] = await plot([r1], { out, formats: ['svg'], name: 'single' });
    expect(one).toMatchObject({ figure: 'busbw', series: 2, points: 6 });
    const svg1 = readFileSync(join(out, 'single-busbw.svg'), 'utf8');
    expect(markGroups(svg1, 'line').reduce((x, y) => x + y, 0)).toBe(2);
    expect(markGroups(svg1, 'symbol').reduce((x, y) => x + y, 0)).toBe(6); // out-of-place rows only
    expect(markGroups(svg1, 'rule').reduce((x, y) => x + y, 0)).toBe(1);
    expect(svg1).toContain('STREAM-like copy: 30.0 GB/s');
    // A copy of an input (collectives-latest.json beside the dated file) is drawn once.
    const copy = join(dir, 'collectives-latest.json');
    writeFileSync(copy, readFileSync(r2));
    const [both] = await plot([r1, r2, copy], { out, formats: ['svg', 'png'] });
    expect(both).toMatchObject({ series: 4, points: 12 });
    const svg2 = readFileSync(join(out, 'collectives-busbw.svg'), 'utf8');
    expect(markGroups(svg2, 'line').reduce((x, y) => x + y, 0)).toBe(4);
    expect(svg2).toContain('(collectives-2): 25.0 GB/s');
    expect(markGroups(svg2, 'rule').reduce((x, y) => x + y, 0)).toBe(2);
    expect(decodePng(join(out, 'collectives-busbw.png')).colored).toBeGreaterThan(100);
  }, 60_000);

  it('kernels results: matmul GFLOP/s vs n for fast, reference and OpenBLAS (when measured)', async () => {
    const rows = [64, 128, 256].flatMap((n) => [
      { kernel: 'matmul', dtype: 'fp32', n, fastGflops: n / 10, referenceGflops: 1, openblasGflops: n / 8 },
      { kernel: 'matmul', dtype: 'bf16', n, fastGflops: n / 12, referenceGflops: 0.8, openblasGflops: null },
    ]);
    const p = join(dir, 'kernels-x.json');
    writeFileSync(p, JSON.stringify({ suite: 'kernels', rows: [...rows, { kernel: 'attention', impl: 'fast', forwardMs: 1 }] }));
    const [w] = await plot([p], { out: join(dir, 'k'), formats: ['svg'] });
    expect(w).toMatchObject({ figure: 'matmul', series: 5, points: 15 });
    const svg = readFileSync(join(dir, 'k', 'kernels-matmul.svg'), 'utf8');
    expect(markGroups(svg, 'line').reduce((x, y) => x + y, 0)).toBe(5);
    expect(svg).toContain('OpenBLAS fp32 (1 thread)');
  }, 60_000);

  it('the command: writes the files and lists them; unreadable inputs are clear errors (exit 1)', () => {
    const a = writeRun('cli-run', 3, 0);
    const out = join(dir, 'cli');
    const ok = spawnSync(process.execPath, ['bin/ascent.mjs', 'plot', a, '--out', out, '--format', 'png'], { encoding: 'utf8' });
    expect(ok.status, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/reward: 1 series, 3 points -> .*cli-run-reward\.png/);
    expect(existsSync(join(out, 'cli-run-reward.png'))).toBe(true);
    expect(existsSync(join(out, 'cli-run-reward.svg'))).toBe(false);
    const rpc = join(dir, 'rpc-x.json');
    writeFileSync(rpc, JSON.stringify({ suite: 'rpc', rows: [{ p50Us: 1 }] }));
    const bad = spawnSync(process.execPath, ['bin/ascent.mjs', 'plot', rpc, '--out', out], { encoding: 'utf8' });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/rpc suite, which has no figure; figures exist for collectives and kernels/);
    const missing = spawnSync(process.execPath, ['bin/ascent.mjs', 'plot', join(dir, 'nope.jsonl')], { encoding: 'utf8' });
    expect(missing.status).toBe(1);
    expect(missing.stderr).toMatch(/nope\.jsonl: no such file/);
    const fmt = spawnSync(process.execPath, ['bin/ascent.mjs', 'plot', a, '--format', 'jpg'], { encoding: 'utf8' });
    expect(fmt.status).toBe(1);
    expect(fmt.stderr).toMatch(/--format takes svg, png or svg,png; got "jpg"/);
  }, 60_000);
});
