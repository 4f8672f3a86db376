/**
 * Device buffers as JS objects over a native handle (src/runtime/device/buffer.ts,
 * native/device/buffer_table.h): the metadata and the liveness flag are plain JS fields, release
 * is idempotent and per holder, and the memory of a buffer nobody released returns to the pool
 * when its handle is collected, without a collected handle touching the buffer that took its
 * native slot.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { DeviceBuffer, Tensor, configureDevice, importBuffer } from '../src/runtime/device/device-index.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

describe('device buffers', () => {
  it('carries id, device and size as own fields, and `released` flips on release (once)', () => {
    const d = configureDevice(40, { capacityBytes: '1MiB' });
    const a = d.alloc(100);
    const b = d.alloc(64);
    expect(a).toBeInstanceOf(DeviceBuffer);
    expect(Object.getOwnPropertyDescriptor(a, 'size')).toMatchObject({ value: 100 });
    expect([a.device, a.size, b.size]).toEqual([40, 100, 64]);
    expect(b.id).toBeGreaterThan(a.id);
    expect(a.released).toBe(false);
    a.release();
    expect(a.released).toBe(true);
    expect(b.released).toBe(false);
    expect(d.stats()).toMatchObject({ allocated: 64, numAllocs: 1 });
    a.release(); // idempotent: b keeps its memory
    expect(d.stats()).toMatchObject({ allocated: 64, numAllocs: 1 });
    expect(String(a)).toBe(`DeviceBuffer(${a.id}: 100 bytes on device 40, released)`);
    b.release();
    expect(d.stats().allocated).toBe(0);
  });

  it('an imported buffer is its own reference: the memory stays until every holder released', async () => {
    const d = configureDevice(41, { capacityBytes: '1MiB' });
    const t = Tensor.fromArray(d, [1, 2, 3, 4], [4]);
    const again = importBuffer(t.buffer.id);
    expect([again.id, again.device, again.size]).toEqual([t.buffer.id, 41, 16]);
    t.release();
    expect(t.released).toBe(true);
    expect(again.released).toBe(false);
    expect(d.stats().numAllocs).toBe(1);
    const view = new Tensor(d, again, 'fp32', [4]);
    expect(Array.from(await view.toArray())).toEqual([1, 2, 3, 4]);
    view.release();
    expect(d.stats().numAllocs).toBe(0);
  });

  it('a buffer nobody released returns its memory when collected; a released one is not freed twice', () => {
    // A child with --expose-gc: collection is forced there, and the finalizers run from the event loop.
    const script = `
      const { Device, configureDevice, Tensor } = await import(${JSON.stringify(join(ROOT, 'dist/src/runtime/device/device-index.js'))});
      const d = configureDevice(42, { capacityBytes: '1MiB' });
      // Released, then its native slot is taken by 'kept': the collected handle of the first must not free it.
      let early = d.alloc(4096);
      early.release();
      const kept = Tensor.fromArray(d, [5, 6, 7, 8], [4]);
      early = undefined;
      (() => { for (let i = 0; i < 100; i++) d.alloc(4096); })();
      const held = d.stats().allocated;
      const deadline = Date.now() + 30000;
      while (d.stats().allocated > 64 && Date.now() < deadline) {
        globalThis.gc();
        await new Promise((r) => setImmediate(r));
      }
      const after = d.stats();
      console.log(JSON.stringify({ held, allocated: after.allocated, numAllocs: after.numAllocs, kept: Array.from(await kept.toArray()) }));
    `;
    const r = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as { held: number; allocated: number; numAllocs: number; kept: number[] };
    expect(out.held).toBe(64 + 100 * 4096);
    expect(out).toMatchObject({ allocated: 64, numAllocs: 1, kept: [5, 6, 7, 8] });
  });
});
