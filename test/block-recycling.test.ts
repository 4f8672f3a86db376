/**
 * Freed blocks' native records are reused by the next allocations (native/device/recycling_allocator.h,
 * native/device/node_cache.h). A reused record must be a new block in every way: its own id, its
 * own memory, and nothing of it reachable through the buffer, handle or id of the block it was.
 */
import { describe, expect, it } from 'vitest';
import { Tensor, configureDevice, importBuffer, matmul } from '../src/runtime/device/device-index.js';
import { BUFFER_HANDLE } from '../src/runtime/native.js';
import { thrown } from './helpers/refused.js';

describe('recycled block records', () => {
  it('hundreds of held outputs, freed and made again, are new blocks; the freed ones stay unreachable', async () => {
    const d = configureDevice(43, { capacityBytes: '8MiB' });
    const s = d.newStream();
    const n = 8;
    const a = Tensor.fromArray(
      d,
      Float32Array.from({ length: n * n }, (_, i) => i % 7),
      [n, n],
      { stream: s },
    );
    const eye = Tensor.fromArray(
      d,
      Float32Array.from({ length: n * n }, (_, i) => (i % (n + 1) === 0 ? 1 : 0)),
      [n, n],
      { stream: s },
    );
    const base = d.stats().numAllocs;
    // More than malloc's and the caches' small per-thread lists keep: the second round reuses them.
    const count = 600;
    const first = Array.from({ length: count }, () => matmul(a, eye, { stream: s }));
    await s.synchronize();
    const firstIds = first.map((t) => t.buffer.id);
    const firstHandles = first.map((t) => t.buffer[BUFFER_HANDLE]);
    for (const t of first) t.release();
    expect(d.stats().numAllocs).toBe(base);

    const second = Array.from({ length: count }, (_, i) => Tensor.fromArray(d, [i, i + 1], [2], { stream: s }));
    const secondIds = second.map((t) => t.buffer.id);
    expect(new Set([...firstIds, ...secondIds]).size).toBe(2 * count);
    expect(d.stats().numAllocs).toBe(base + count);
    // Each new block holds its own data.
    for (const i of [0, 1, count / 2, count - 1]) expect(Array.from(await second[i]!.toArray({ stream: s }))).toEqual([i, i + 1]);
    // A freed block's id no longer imports, and its old handle reads as released.
    expect(() => importBuffer(firstIds[0]!)).toThrow();
    const e = thrown(() => s.native.fill(firstHandles[count - 1]!, 0, 2, 0, 1, 0, 0));
    expect(e.message).toBe(`Buffer ${firstIds[count - 1]} passed as dst was already released. HINT: do not use a tensor after release().`);
    for (const t of second) t.release();
    expect(d.stats().numAllocs).toBe(base);
    a.release();
    eye.release();
    s.destroy();
  });
});
