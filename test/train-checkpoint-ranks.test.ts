/**
 * Checkpoints across strategies on real ranks (test/fixtures/train/ckpt-cases.mjs):
 * saved by fsdp2 on 4 ranks, loaded exactly by megatron tp2dp2 and by one device, the
 * next step agrees; a failed write fails on every rank.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';

let dir: string;
beforeAll(() => {
  ensureParallelBuilt();
  dir = mkdtempSync(join(tmpdir(), 'ascent-ckpt-ranks-'));
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it('fsdp2 dp4 save -> megatron tp2dp2 and single-device load; failed saves fail everywhere', async () => {
  const r = await launchFixture(4, 'test/fixtures/train/ckpt-cases.mjs', [dir], {}, 120_000);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  expect(r.results.length).toBe(4);
  for (const x of r.results as Array<Record<string, unknown>>) {
    expect(x.exact, `rank ${x.rank}`).toBe(true);
    expect(x.extra).toEqual({ note: 'fsdp2' });
    expect(x.loadedDir).toBe(join(dir, 'step-000001'));
    expect(x.megVsFsdp as number).toBeLessThan(1e-5);
    expect(x.failedSave as string).toMatch(x.rank === 0 ? /ENOTDIR|EEXIST/ : /failed on another rank/);
  }
  expect((r.results[0] as Record<string, unknown>).singleVsFsdp as number).toBeLessThan(1e-5);
}, 150_000);
