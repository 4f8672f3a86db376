/**
 * Benchmark output and result files: nccl-tests' text format column for column (checked
 * against lines nccl-tests prints), result files with metadata that never overwrite an
 * earlier run, `--help` on every suite.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { cG, ncclFooterLines, ncclHeaderLines, ncclRedopRoot, ncclRow, ncclTime } from '../dist/bench/nccl-format.js';
import { saveResults, stamp } from '../dist/bench/results.js';
import { formatTable } from '../dist/bench/table.js';
import { withMatmulTargets } from '../dist/bench/kernels-targets.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'ascent-bench-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('nccl-tests format', () => {
  it('header, rows and footer match nccl-tests output', () => {
    const head = ncclHeaderLines({
      op: 'allGather',
      ranks: 2,
      minBytes: 1024,
      maxBytes: 8192,
      stepFactor: 2,
      warmupIters: 5,
      iters: 20,
      pid: 6899,
      host: 'node-a',
      device: 'Ascent simulated NPU',
    });
    expect(head.slice(0, 4)).toEqual([
      '# Collective test starting: all_gather_perf',
      '# nThread 2 nGpus 1 minBytes 1024 maxBytes 8192 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0',
      '#',
      '# Using devices',
    ]);
    expect(head[4]).toBe('#  Rank  0 Group  0 Pid   6899 on     node-a device  0 [0x00] Ascent simulated NPU');
    expect(head[5]).toBe('#  Rank  1 Group  0 Pid   6899 on     node-a device  1 [0x00] Ascent simulated NPU');
    // The three column-head lines as nccl-tests prints them (trailing blanks aside).
    expect(head.slice(-3).map((l) => l.trimEnd())).toEqual([
      '#                                                              out-of-place                       in-place',
      '#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong',
      '#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)',
    ]);
    const { redop, root } = ncclRedopRoot('allGather', 'sum');
    expect([redop, root]).toEqual(['none', -1]);
    expect(ncclRedopRoot('allReduce', 'max')).toEqual({ redop: 'max', root: -1 });
    expect(ncclRedopRoot('broadcast', 'sum')).toEqual({ redop: 'none', root: 0 });
    // A row nccl-tests printed: 1024 B all_gather on 64 ranks (float, out of place then in place).
    expect(
      ncclRow(
        1024,
        16,
        'float',
        redop,
        root,
        { timeUs: 54.07, algbwGBs: 0.0189, busbwGBs: 0.0186, wrong: 0 },
        { timeUs: 55.8, algbwGBs: 0.0184, busbwGBs: 0.0181, wrong: 0 },
      ),
    ).toBe('        1024            16     float    none      -1    54.07    0.02    0.02      0    55.80    0.02    0.02      0');
    expect([ncclTime(27211.04), ncclTime(339.61), ncclTime(54.071)]).toEqual(['  27211', '  339.6', '  54.07']);
    expect(
      ncclFooterLines('allGather', [
        { timeUs: 1, algbwGBs: 1, busbwGBs: 19.73, wrong: 0 },
        { timeUs: 1, algbwGBs: 1, busbwGBs: 23.0766, wrong: 0 },
      ]),
    ).toEqual(['# Out of bounds values : 0 OK', '# Avg bus bandwidth    : 21.4033 ', '#', '# Collective test concluded: all_gather_perf', '#']);
    expect(ncclFooterLines('allReduce', [{ timeUs: 1, algbwGBs: 1, busbwGBs: 1, wrong: 3 }])[0]).toBe('# Out of bounds values : 1 FAILED');
    expect([cG(0), cG(1.5), cG(450.85), cG(1234567), cG(0.00001234)]).toEqual(['0', '1.5', '450.85', '1.23457e+06', '1.234e-05']);
  });
});

describe('benchmark result files', () => {
  it('carry metadata and never overwrite an earlier run; <suite>-latest.json is a copy of the newest', () => {
    const a = saveResults('demo', { rows: [{ x: 1 }] }, dir);
    const b = saveResults('demo', { rows: [{ x: 2 }] }, dir);
    expect(a.path).not.toBe(b.path);
    expect(a.path).toMatch(new RegExp(`demo-${stamp(new Date(a.meta.date))}(-\\d+)?\\.json$`));
    expect(readdirSync(dir).sort()).toEqual([a.path, b.path, b.latest].map((p) => p.slice(dir.length + 1)).sort());
    const first = JSON.parse(readFileSync(a.path, 'utf8'));
    expect(first.rows).toEqual([{ x: 1 }]);
    expect(JSON.parse(readFileSync(b.latest, 'utf8')).rows).toEqual([{ x: 2 }]);
    expect(first.suite).toBe('demo');
    expect(first.meta.versions.node).toBe(process.version);
    expect(first.meta.host.cores).toBe(cpus().length);
    expect(first.meta.host.cpuModel).toBe(cpus()[0]!.model.trim());
    expect(first.meta.loadAvg).toHaveLength(3);
    expect(Date.parse(first.meta.date)).not.toBeNaN();
    expect(first.meta.git === null || /^[0-9a-f]{40}$/.test(first.meta.git.commit)).toBe(true);
    expect(stamp(new Date('2026-01-02T03:04:05Z'))).toBe('20260102-030405');
  });

  it('one table style: every key a column, numbers right-aligned, missing values as -', () => {
    const t = formatTable([
      { name: 'a', ms: 1.5 },
      { name: 'bb', ms: 12, extra: null },
    ]).split('\n');
    expect(t[1]).toMatch(/│ name\s+│\s+ms │ extra │/);
    expect(t.some((l) => /│ a\s+│\s+1\.5 │\s+- │/.test(l))).toBe(true);
    expect(t.some((l) => /│ bb\s+│\s+12 │\s+- │/.test(l))).toBe(true);
  });
});

describe('bench --help', () => {
  const bench = (...args: string[]) => spawnSync(process.execPath, ['dist/bench/main.js', ...args], { encoding: 'utf8', timeout: 60_000 });

  it('every suite prints its usage and exits 0; bad flags print the error and the usage (exit 2)', () => {
    for (const suite of ['rpc', 'collectives', 'model-kernels', 'kernels', 'train-step', 'grpo-step', 'trainer', 'sync']) {
      const r = bench(suite, '--help');
      expect(r.status, `${suite}: ${r.stderr}`).toBe(0);
      expect(r.stdout, suite).toMatch(new RegExp(`^Usage: npm run bench -- ${suite}\\b`));
    }
    expect(bench('--help').status).toBe(0);
    const unknown = bench('rpc', '--rounds', '3');
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toMatch(/bench rpc: unknown argument "--rounds"; it takes no flags[\s\S]*Usage: npm run bench -- rpc/);
    const badValue = bench('collectives', '--ranks', 'zero');
    expect(badValue.status).toBe(2);
    expect(badValue.stderr).toMatch(/Expected an integer >= 1 for --ranks but received "zero"[\s\S]*Usage: npm run bench -- collectives/);
    const badRepeats = bench('kernels', '--repeats', '0');
    expect(badRepeats.status).toBe(2);
    expect(badRepeats.stderr).toMatch(/Expected an integer in 1\.\.100 for --repeats but received "0"[\s\S]*Usage: npm run bench -- kernels/);
    const noSuite = bench('nope');
    expect(noSuite.status).toBe(2);
    expect(noSuite.stderr).toMatch(/unknown suite "nope"/);
  }, 120_000);
});

describe('kernels bench targets', () => {
  const row = (dtype: string, n: number, fastGflops: number, fastVsOpenblas: number | null) => ({ kernel: 'matmul', dtype, n, fastGflops, fastVsOpenblas });
  it('checks fp32 against OpenBLAS (0.8 at n = 64, 0.95 from 128) and bf16 against fp32 (1.5 from 256)', () => {
    const rows = withMatmulTargets([
      row('fp32', 64, 40, 0.4),
      row('fp32', 96, 50, 0.5),
      row('fp32', 256, 200, 1.9),
      row('bf16', 128, 150, null),
      row('bf16', 256, 250, null),
      row('bf16', 512, 400, null),
    ]);
    expect(rows[0]).toMatchObject({ targetIs: 'fastVsOpenblas >= 0.8', target: 0.5 });
    expect(rows[1]!.target).toBeUndefined(); // n = 96: no target names it
    expect(rows[2]).toMatchObject({ targetIs: 'fastVsOpenblas >= 0.95', target: 2 });
    expect(rows[3]!.target).toBeUndefined(); // bf16 below 256, and no fp32 row of n = 128
    expect(rows[3]!.bf16VsFp32).toBeUndefined();
    expect(rows[4]).toMatchObject({ bf16VsFp32: 1.25, targetIs: 'bf16VsFp32 >= 1.5', target: 0.833 });
    expect(rows[5]!.target).toBeUndefined(); // no fp32 row of n = 512 to compare with
  });
  it('states the bf16 target on either bf16 kernel (AMX, AVX-512 BF16), none elsewhere, and says which kernel bf16 ran on', () => {
    for (const kernel of ['amx-bf16', 'avx512-bf16']) {
      expect(withMatmulTargets([row('fp32', 256, 60, 0.9), row('bf16', 256, 180, null)], kernel)[1]).toMatchObject({
        bf16VsFp32: 3,
        targetIs: 'bf16VsFp32 >= 1.5',
        target: 2,
      });
    }
    const rows = withMatmulTargets([row('fp32', 256, 60, 0.9), row('bf16', 256, 75, null)], 'avx2-fma');
    expect(rows[1]).toMatchObject({ bf16VsFp32: 1.25, targetIs: 'none: no AMX or AVX-512 BF16 here (bf16 runs on avx2-fma)', target: null });
    expect(rows[0]).toMatchObject({ targetIs: 'fastVsOpenblas >= 0.95' }); // fp32 targets are unaffected
  });
  it('leaves fp32 rows without a target when OpenBLAS is missing', () => {
    const [r] = withMatmulTargets([row('fp32', 128, 90, null)]);
    expect(r!.target).toBeUndefined();
    expect(r).toEqual(row('fp32', 128, 90, null));
  });
});
