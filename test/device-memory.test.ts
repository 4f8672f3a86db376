import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { Device, Tensor, configureDevice, fill, loadNative } from '../src/runtime/device/device-index.js';
import { DeviceOOMError, InvalidArgumentError } from '../src/runtime/errors.js';

const KiB = 1024;
const MiB = 1024 * KiB;

function rssBytes(): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
  return Number(m![1]) * 1024;
}

describe('device memory pool', () => {
  it('tracks allocated, peak and live allocations, 64-byte aligned', () => {
    const d = configureDevice(1, { capacityBytes: '1MiB' });
    const s0 = d.stats();
    expect(s0).toMatchObject({ allocated: 0, capacity: MiB, numAllocs: 0 });
    const a = d.alloc(100);
    const b = d.alloc(64);
    expect(d.stats()).toMatchObject({ allocated: 128 + 64, numAllocs: 2, peak: 192 });
    expect(a.size).toBe(100);
    a.release();
    expect(a.released).toBe(true);
    expect(d.stats()).toMatchObject({ allocated: 64, numAllocs: 1, peak: 192 });
    d.resetPeakStats();
    expect(d.stats().peak).toBe(64);
    b.release();
    expect(d.stats().allocated).toBe(0);
    expect(d.stats().largestFreeBlock).toBe(MiB);
  });

  it('throws DeviceOOMError naming device, request, usage and largest free block', () => {
    const d = configureDevice(2, { capacityBytes: '1MiB' });
    const held = d.alloc(256 * KiB);
    let err: unknown;
    try {
      d.alloc(2 * MiB);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(DeviceOOMError);
    const e = err as DeviceOOMError;
    expect(e.code).toBe('ASCENT_DEVICE_OOM');
    expect(e.message).toContain('Device 2 out of memory: tried to allocate 2.00 MiB; 256.00 KiB of 1.00 MiB in use, largest free block 768.00 KiB. HINT:');
    expect(e.details).toMatchObject({ device: 2, requested: 2 * MiB, allocated: 256 * KiB, capacity: MiB, largestFreeBlock: 768 * KiB });
    expect(d.stats().allocated).toBe(256 * KiB);
    held.release();
  });

  it('never hands out memory past capacity', () => {
    const d = configureDevice(3, { capacityBytes: '1MiB' });
    const bufs = [];
    for (;;) {
      try {
        bufs.push(d.alloc(100 * KiB));
      } catch (e) {
        expect(e).toBeInstanceOf(DeviceOOMError);
        break;
      }
      expect(bufs.length).toBeLessThan(100);
    }
    expect(bufs.length).toBe(10);
    expect(d.stats().allocated).toBeLessThanOrEqual(MiB);
    expect(() => d.alloc(Number.MAX_SAFE_INTEGER)).toThrow(DeviceOOMError);
    for (const b of bufs) b.release();
    expect(d.stats().allocated).toBe(0);
  });

  it('reports the largest free block under fragmentation and coalesces on free', () => {
    const d = configureDevice(4, { capacityBytes: '1MiB' });
    const q = [0, 1, 2, 3].map(() => d.alloc(256 * KiB));
    expect(d.stats().largestFreeBlock).toBe(0);
    q[0]!.release();
    q[2]!.release();
    expect(d.stats()).toMatchObject({ allocated: 512 * KiB, largestFreeBlock: 256 * KiB });
    let err: DeviceOOMError | undefined;
    try {
      d.alloc(512 * KiB);
    } catch (e) {
      err = e as DeviceOOMError;
    }
    expect(err).toBeInstanceOf(DeviceOOMError);
    expect(err!.message).toContain('largest free block 256.00 KiB');
    expect(err!.message).toContain('fragmented');
    q[1]!.release();
    expect(d.stats().largestFreeBlock).toBe(768 * KiB);
    const big = d.alloc(768 * KiB);
    expect(d.stats().allocated).toBe(MiB);
    big.release();
    q[3]!.release();
    expect(d.stats()).toMatchObject({ allocated: 0, largestFreeBlock: MiB });
  });

  // The pool's maps reuse the nodes of erased entries (native/device/node_cache.h): a node
  // handed back with a stale key or value would show up as overlapping or lost blocks here.
  it('random alloc / free churn: live blocks never overlap, and everything coalesces back', async () => {
    const d = configureDevice(11, { capacityBytes: '4MiB' }); // 24 live blocks of at most 64 KiB fit however fragmented
    const stream = d.defaultStream;
    let x = 12345;
    const rand = (n: number) => {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      return (x >>> 0) % n;
    };
    const live: { t: Tensor; tag: number }[] = [];
    let tags = 0;
    for (let i = 0; i < 3000; i++) {
      if (live.length > 0 && (live.length >= 24 || rand(3) === 0)) {
        live.splice(rand(live.length), 1)[0]!.t.release();
        continue;
      }
      const n = 16 * (1 + rand(1024)); // 64 B .. 64 KiB
      const t = Tensor.empty(d, [n], 'fp32');
      const tag = ++tags;
      fill(t, tag, { stream });
      live.push({ t, tag });
    }
    expect(d.stats().numAllocs).toBe(live.length);
    for (const { t, tag } of live) {
      const v = (await t.toArray({ stream })) as Float32Array;
      expect(v.every((y) => y === tag)).toBe(true);
    }
    for (const { t } of live) t.release();
    await stream.synchronize();
    expect(d.stats()).toMatchObject({ allocated: 0, numAllocs: 0, largestFreeBlock: 4 * MiB });
  });

  it('keeps memory alive while an op that uses it is pending, then returns it', async () => {
    const d = configureDevice(5, { capacityBytes: '1MiB' });
    const s = d.newStream();
    const t = Tensor.empty(d, [1024], 'fp32');
    s.sleep(200);
    fill(t, 3, { stream: s });
    t.release();
    expect(s.pending().map((p) => p.op)).toEqual(['sleep', 'fill']);
    expect(d.stats()).toMatchObject({ allocated: 4096, numAllocs: 1 });
    await s.synchronize();
    expect(d.stats()).toMatchObject({ allocated: 0, numAllocs: 0 });
    s.destroy();
  });

  it('counts each device->host read as a host sync', async () => {
    const d = Device.get(6);
    const before = d.stats().hostSyncs;
    const t = Tensor.fromArray(d, [1, 2, 3], [3]);
    expect(Array.from(await t.toArray())).toEqual([1, 2, 3]);
    await t.toBytes();
    expect(d.stats().hostSyncs).toBe(before + 2);
    t.release();
  });

  it('rejects re-configuring a device with live allocations; same capacity is fine', () => {
    const d = configureDevice(7, { capacityBytes: 2 * MiB });
    const b = d.alloc(10);
    expect(() => configureDevice(7, { capacityBytes: 4 * MiB })).toThrow(InvalidArgumentError);
    expect(() => configureDevice(7, { capacityBytes: 4 * MiB })).toThrow(/while 1 allocation\(s\)/);
    expect(() => configureDevice(7, { capacityBytes: 2 * MiB })).not.toThrow();
    b.release();
    configureDevice(7, { capacityBytes: 4 * MiB });
    expect(d.stats().capacity).toBe(4 * MiB);
    const host = loadNative().hostMemory();
    expect(() => configureDevice(8, { capacityBytes: host * 2 })).toThrow(/exceeds host memory/);
    expect(() => configureDevice(8, { capacityBytes: 'lots' })).toThrow(InvalidArgumentError);
    expect(() => configureDevice(8, { capacity: 5 } as never)).toThrow(/Unknown option 'capacity'/);
  });

  it('defaults to 16GiB (bounded by host RAM); a freed large block stays cached until emptyCache() returns it to the OS', async () => {
    const d = Device.get(9);
    const host = loadNative().hostMemory();
    expect(d.stats().capacity).toBe(Math.min(16 * 1024 ** 3, host));
    const base = rssBytes();
    const t = Tensor.empty(d, [32 * MiB], 'fp32'); // 128 MiB
    fill(t, 1);
    await d.defaultStream.synchronize();
    expect(rssBytes() - base).toBeGreaterThan(100 * MiB);
    t.release();
    // Cached: the next large buffer (a weight sync's staging, say) lands on faulted pages.
    expect(d.stats().cached).toBeGreaterThanOrEqual(128 * MiB);
    expect(rssBytes() - base).toBeGreaterThan(100 * MiB);
    const again = Tensor.empty(d, [32 * MiB], 'fp32');
    fill(again, 2);
    await d.defaultStream.synchronize();
    expect(rssBytes() - base).toBeLessThan(160 * MiB);
    expect(d.stats().cached).toBeLessThan(MiB);
    again.release();
    expect(d.emptyCache()).toBeGreaterThanOrEqual(128 * MiB);
    expect(d.stats().cached).toBe(0);
    expect(rssBytes() - base).toBeLessThan(28 * MiB);
    expect(d.emptyCache()).toBe(0);
  });

  it('keeps freed blocks resident up to the high-water mark, so the next outputs reuse faulted pages', async () => {
    const d = Device.get(10);
    const base = rssBytes();
    const round = async () => {
      const ts = Array.from({ length: 48 }, () => Tensor.empty(d, [256 * KiB], 'fp32')); // 48 x 1 MiB
      for (const t of ts) fill(t, 1);
      await d.defaultStream.synchronize();
      return ts;
    };
    const first = await round();
    expect(rssBytes() - base).toBeGreaterThan(40 * MiB);
    for (const t of first) t.release();
    // Cached (within the 48 MiB this device peaked at), not returned to the OS ...
    expect(rssBytes() - base).toBeGreaterThan(40 * MiB);
    // ... so a second round of outputs lands on those pages instead of faulting 48 MiB more.
    const second = await round();
    expect(rssBytes() - base).toBeLessThan(60 * MiB);
    for (const t of second) t.release();
  });

  it('keeps the cache after resetPeakStats (the weight sync resets the peak every step)', async () => {
    const d = Device.get(13);
    const base = rssBytes();
    const ts = Array.from({ length: 48 }, () => Tensor.empty(d, [256 * KiB], 'fp32')); // 48 x 1 MiB
    for (const t of ts) fill(t, 1);
    await d.defaultStream.synchronize();
    for (const t of ts) t.release(); // cached: the device peaked at 48 MiB
    d.resetPeakStats(); // the reported peak drops to the ~0 bytes live now
    // The next freed block tests the cache's budget; had it followed the reported peak (now 1 MiB),
    // 48 MiB of cached pages would exceed it and all go back to the OS.
    Tensor.empty(d, [256 * KiB], 'fp32').release();
    expect(rssBytes() - base).toBeGreaterThan(40 * MiB);
  });

  it('bounds how far the host runs ahead of a stream: an enqueue past 256 waiting ops waits for the stream', async () => {
    const d = Device.get(11);
    const s = d.newStream();
    const t = Tensor.empty(d, [16], 'fp32', { stream: s });
    s.sleep(300); // the stream is busy while 400 fills are enqueued behind it
    for (let i = 0; i < 400; i++) fill(t, i, { stream: s });
    // Without the bound all 401 ops would be waiting now; with it, each enqueue past 256 waited until the
    // stream had run an op. The bound is on waiting ops: the one the stream thread is running may
    // come on top of them, so count the queued ones only.
    expect(s.pending().filter((o) => o.state === 'queued').length).toBeLessThanOrEqual(256);
    await s.synchronize();
    expect(Array.from(await t.toArray({ stream: s }))[0]).toBe(399);
    t.release();
    s.destroy();
  });

  it('a throttled enqueue waits for one op, not for the queue to drain to half (no hysteresis)', async () => {
    const d = Device.get(12);
    const s = d.newStream();
    s.sleep(200); // the stream is busy while 256 ops queue up behind it
    for (let i = 0; i < 280; i++) s.sleep(5);
    // Each of the last 24 enqueues waited until one 5 ms op had run, so about 255 are still
    // waiting; had the host waited for the queue to drain under 128, at most 128 + 24 would be.
    const queued = s.pending().filter((o) => o.state === 'queued').length;
    expect(queued).toBeGreaterThan(200);
    expect(queued).toBeLessThanOrEqual(256);
    await s.synchronize();
    s.destroy();
  });
});
