/**
 * Sharded safetensors loading on 4 real ranks under launch
 * (test/fixtures/parallel/load-cases.mjs), both modes, on a [4] and a [2, 2] mesh:
 * every local shard equals the host slice of the file byte for byte; peak device
 * memory during the load (resetPeakStats first) stays within the local shards plus
 * one bucket, far below one full parameter; a dim too small for the mesh is an
 * error naming the parameter, the dim and both sizes; a malformed checkpoint's error
 * reaches every rank without a hang.
 */
import { copyFileSync, mkdtempSync, rmSync, truncateSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';
import { writeSafetensors, type SafetensorsDType } from '../src/model/safetensors.js';

const FIXTURE = 'test/fixtures/parallel/load-cases.mjs';
const BUCKET = 32 * 1024;
const SLACK = 4096; // 64-byte alignment of each allocation and the few-byte control tensors
const dir = mkdtempSync(join(tmpdir(), 'ascent-sharded-load-'));
const good = join(dir, 'good.safetensors');
const bad = join(dir, 'bad.safetensors');
// A hang becomes a CollectiveTimeoutError in 15 s instead of HCCL's 30 minutes.
const ENV = { HCCL_EXEC_TIMEOUT: '15' };

beforeAll(async () => {
  ensureParallelBuilt();
  const E: Record<string, number> = { F32: 4, BF16: 2, I64: 8 };
  const tensors: Array<[string, SafetensorsDType, number[]]> = [
    ['embed', 'F32', [64, 1000]],
    ['w_odd', 'BF16', [7, 10]],
    ['norm', 'F32', [33]],
    ['ids', 'I64', [13]],
    ['bias', 'F32', [3]],
    ['experts', 'BF16', [16, 300]],
  ];
  await writeSafetensors(
    good,
    tensors.map(([name, dtype, shape], k) => {
      const data = new Uint8Array(shape.reduce((a, b) => a * b, 1) * E[dtype]!);
      for (let i = 0; i < data.length; i++) data[i] = (i * 31 + k * 7 + (i >> 8)) & 0xff;
      return { name, dtype, shape, data };
    }),
  );
  copyFileSync(good, bad);
  truncateSync(bad, statSync(bad).size - 10);
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * The four loads that succeed (two modes x two meshes) share one launch: the fixture runs them
 * in turn, each measuring its peak from what is allocated when it starts and releasing what it
 * loaded, and tags each RESULT with the case's index. The error cases keep launches of their own.
 */
const OK_CASES = ['rank0-broadcast', 'every-rank-reads'].flatMap((mode) => ['4', '2x2'].map((mesh) => [mode, mesh] as const));
let okRun: Promise<LaunchRun> | undefined;
async function okCase(mode: string, mesh: string): Promise<LaunchRun> {
  okRun ??= launchFixture(4, FIXTURE, [JSON.stringify(OK_CASES.map(([m, sh]) => [m, good, sh, String(BUCKET), 'ok']))], ENV, 110_000);
  const index = OK_CASES.findIndex(([m, sh]) => m === mode && sh === mesh);
  expect(index, `${mode} ${mesh}`).toBeGreaterThanOrEqual(0);
  const run = await okRun;
  return { ...run, results: run.results.filter((x) => x.case === index) };
}

describe('loadSharded', () => {
  for (const mode of ['rank0-broadcast', 'every-rank-reads'] as const) {
    it(`${mode}: [4] and [2, 2] meshes, exact shards, peak device memory within shards + one bucket`, async () => {
      for (const mesh of ['4', '2x2']) {
        const r = await okCase(mode, mesh);
        expect(r.stderr).toBe('');
        expect(r.code).toBe(0);
        expect(r.results.length).toBe(4);
        for (const x of r.results) {
          const { peak, localBytes, largest } = x as unknown as { peak: number; localBytes: number; largest: number };
          expect(x.wrong, `rank ${x.rank}`).toEqual([]);
          expect(x.names).toEqual(['embed', 'w_odd', 'norm', 'ids', 'bias', 'experts']);
          expect(peak).toBeGreaterThanOrEqual(localBytes);
          const bound = localBytes + (mode === 'rank0-broadcast' ? BUCKET : 0) + SLACK;
          expect(peak, `rank ${x.rank} (mesh ${mesh})`).toBeLessThanOrEqual(bound);
          // The bound means something: one full parameter on the device would break it.
          expect(bound).toBeLessThan(largest);
        }
        const shapes = r.results.map((x) => x.shapes as Record<string, number[]>);
        if (mesh === '4') {
          // torch.chunk: 13 -> [4, 4, 4, 1]; 10 -> [3, 3, 3, 1]; 3 -> [1, 1, 1, 0] (allowEmpty).
          expect(shapes.map((s) => s.ids)).toEqual([[4], [4], [4], [1]]);
          expect(shapes.map((s) => s.w_odd)).toEqual([
            [7, 3],
            [7, 3],
            [7, 3],
            [7, 1],
          ]);
          expect(shapes.map((s) => s.bias)).toEqual([[1], [1], [1], [0]]);
          expect(shapes.map((s) => s.embed)).toEqual([
            [16, 1000],
            [16, 1000],
            [16, 1000],
            [16, 1000],
          ]);
        } else {
          // Nested [Shard(0), Shard(0)]: 13 -> [7, 6] -> [4, 3] and [3, 3].
          expect(shapes.map((s) => s.ids)).toEqual([[4], [3], [3], [3]]);
          expect(shapes.map((s) => s.embed)).toEqual([
            [32, 500],
            [32, 500],
            [32, 500],
            [32, 500],
          ]);
          expect(shapes.map((s) => s.experts)).toEqual([
            [8, 150],
            [8, 150],
            [8, 150],
            [8, 150],
          ]);
        }
      }
    }, 120_000);

    it(`${mode}: a dim smaller than the mesh dim is an error on every rank naming the parameter, the dim and the sizes`, async () => {
      const r = await launchFixture(4, FIXTURE, [mode, good, '4', String(BUCKET), 'too-small'], ENV);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      expect(r.results.length).toBe(4);
      for (const x of r.results) {
        const e = x.error as { name: string; message: string };
        expect(e.name).toBe('InvalidArgumentError');
        expect(e.message).toContain(`parameter "bias" (shape [3]): Shard(0) on mesh dim 'dp' splits dim 0 of size 3 over 4 ranks as [1, 1, 1, 0]`);
        expect(e.message).toContain("dim 0 has size 3, smaller than the 4 ranks of 'dp'");
        expect(e.message).toContain('Shard(0, { allowEmpty: true })');
      }
    });

    it(`${mode}: a malformed checkpoint fails on every rank with the file named, without a hang`, async () => {
      const t0 = Date.now();
      const r = await launchFixture(4, FIXTURE, [mode, bad, '4', String(BUCKET), 'ok'], ENV);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      expect(r.results.length).toBe(4);
      for (const x of r.results) {
        const e = x.error as { name: string; code: string; message: string };
        expect(e.name).toBe('CheckpointFormatError');
        expect(e.code).toBe('ASCENT_CHECKPOINT_FORMAT');
        expect(e.message).toContain(bad);
        if (mode === 'rank0-broadcast' && x.rank !== 0) expect(e.message).toContain('(rank 0 read the checkpoint and broadcast this error)');
      }
      // Well below the 15 s collective timeout: nobody waited for a peer that had given up.
      expect(Date.now() - t0).toBeLessThan(12_000);
    });
  }
});
