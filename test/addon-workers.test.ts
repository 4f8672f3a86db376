import { spawnSync } from 'node:child_process';
import { existsSync, statSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { beforeAll, describe, expect, it } from 'vitest';
import { Device, Tensor, add, matmul } from '../src/runtime/device/device-index.js';
import { packageRoot } from '../src/runtime/native.js';

const root = packageRoot();
const fixtures = join(root, 'test', 'fixtures');
const distEntry = join(root, 'dist', 'src', 'runtime', 'device', 'device-index.js');

function newestMtime(dir: string): number {
  return Math.max(
    ...readdirSync(dir, { recursive: true, encoding: 'utf8' })
      .filter((f) => f.endsWith('.ts'))
      .map((f) => statSync(join(dir, f)).mtimeMs),
  );
}

beforeAll(() => {
  // Worker fixtures import dist/: build when it is missing or older than the sources.
  const src = join(root, 'src', 'runtime');
  if (!existsSync(distEntry) || statSync(distEntry).mtimeMs < newestMtime(src)) {
    spawnSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(root, 'tsconfig.json')], { stdio: 'inherit' });
  }
  expect(existsSync(distEntry)).toBe(true);
  Device.get(0); // the addon is loaded in the main thread first
}, 120_000);

function waitMessage<T>(w: Worker, type: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const onMsg = (m: { type: string }) => {
      if (m.type === type) {
        w.off('message', onMsg);
        resolve(m as T);
      }
    };
    w.on('message', onMsg);
    w.once('error', reject);
  });
}

describe('addon in main + 16 workers', () => {
  it('allocates, computes, exchanges handles and survives exits in any order', async () => {
    const baseline = [1, 2, 3].map((o) => Device.get(o).stats().allocated);
    const workers = Array.from({ length: 16 }, (_, i) => new Worker(join(fixtures, 'device-worker.mjs'), { workerData: { index: i, ordinal: 1 + (i % 3) } }));
    const ready = await Promise.all(workers.map((w) => waitMessage<{ handle: unknown }>(w, 'ready')));
    const peer = await Promise.all(
      workers.map((w, i) => {
        const p = waitMessage<{ ok: boolean }>(w, 'peer-ok');
        w.postMessage({ type: 'peer', handle: ready[(i + 5) % 16]!.handle, from: (i + 5) % 16 });
        return p;
      }),
    );
    expect(peer.map((p) => p.ok)).toEqual(new Array(16).fill(true));

    // A handle can be imported in the main thread too while its worker holds it.
    const t = Tensor.fromHandle(ready[3]!.handle as never);
    expect((await t.toArray()).slice(0, 3)).toEqual(Float32Array.from([6, 8, 10]));
    t.release();

    const order = workers.map((_, i) => i).sort(() => Math.random() - 0.5);
    const codes: number[] = [];
    for (const [k, i] of order.entries()) {
      const w = workers[i]!;
      const exited = new Promise<number>((resolve) => w.once('exit', resolve));
      if (k % 3 === 0) {
        w.postMessage({ type: 'busy' });
        await waitMessage(w, 'busy-ok');
        void w.terminate(); // mid-op: a 60 s sleep is running, more work queued
      } else {
        w.postMessage({ type: 'exit', mode: k % 3 === 1 ? 'process.exit' : 'natural' });
      }
      if (k % 2 === 1) codes.push(await exited);
      else void exited.then((c) => codes.push(c));
    }
    await new Promise<void>((resolve) => {
      const check = () => (codes.length === 16 ? resolve() : setTimeout(check, 10));
      check();
    });

    // The main thread is healthy and the workers' memory went back to the pools.
    const d = Device.get(0);
    const a = Tensor.fromArray(d, [1, 2, 3, 4], [2, 2]);
    expect(Array.from(await add(matmul(a, a), a).toArray())).toEqual([8, 12, 18, 26]);
    expect([1, 2, 3].map((o) => Device.get(o).stats().allocated)).toEqual(baseline);
  });

  for (const mode of ['natural', 'exit-busy']) {
    it(`a child node process doing the same exits 0 (${mode})`, () => {
      const r = spawnSync(process.execPath, [join(fixtures, 'device-child.mjs'), mode], { encoding: 'utf8', timeout: 90_000 });
      expect(r.stderr).not.toMatch(/terminate called|Segmentation|Abort|FATAL/);
      expect(r.signal).toBe(null);
      expect(r.status).toBe(0);
      if (mode === 'natural') expect(r.stdout).toContain('child done');
    }, 120_000);
  }
});
