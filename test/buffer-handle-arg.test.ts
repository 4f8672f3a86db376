/**
 * The TS ops pass a buffer's native handle itself (native/device/buffer.cc reads it without a
 * property lookup). The handle must act exactly like the buffer object: same data, same checks,
 * and a released handle reads as released with its buffer's id, even once its slot is reused.
 */
import { describe, expect, it } from 'vitest';
import { Device, Tensor, matmul } from '../src/runtime/device/device-index.js';
import { BUFFER_HANDLE } from '../src/runtime/native.js';
import { thrown } from './helpers/refused.js';

const d0 = Device.get(0);

describe('buffer handles as native op arguments', () => {
  it('a handle and its buffer object name the same memory', async () => {
    const s = d0.newStream();
    const t = Tensor.fromArray(d0, new Float32Array([1, 2, 3, 4]), [4], { stream: s });
    const h = t.buffer[BUFFER_HANDLE];
    s.native.fill(h, 4, 2, 0, 7, 0, 0); // fp32 elements 1..2 through the handle
    s.native.scale(0, t.buffer, 0, h, 0, 4, 2, 0, 0); // in place, object out, handle in
    expect(Array.from(await t.toArray({ stream: s }))).toEqual([2, 14, 14, 8]);
    t.release();
    s.destroy();
  });

  it('a released handle reads as released with its id, also after its slot was reused; bounds are checked', () => {
    const s = d0.newStream();
    const buf = d0.alloc(64);
    const id = buf.id;
    const h = buf[BUFFER_HANDLE];
    expect(thrown(() => s.native.fill(h, 0, 32, 0, 1, 0, 0)).message).toBe('Out of bounds: dst needs bytes [0, 128) but buffer ' + id + ' has 64 bytes.');
    buf.release();
    const e = thrown(() => s.native.fill(h, 0, 4, 0, 1, 0, 0));
    expect(e.message).toBe(`Buffer ${id} passed as dst was already released. HINT: do not use a tensor after release().`);
    expect(e.details).toMatchObject({ argument: 'dst', buffer: id });
    const next = d0.alloc(64); // takes the released slot
    expect(thrown(() => s.native.copyD2D(next, 0, h, 0, 16, 0)).message).toBe(
      `Buffer ${id} passed as src was already released. HINT: do not use a tensor after release().`,
    );
    expect(() => s.native.fill(next[BUFFER_HANDLE], 0, 4, 0, 1, 0, 0)).not.toThrow();
    next.release();
    s.destroy();
  });

  it('matmul through handles gives the bits it gives through buffer objects', async () => {
    const s = d0.newStream();
    const n = 24;
    const av = Float32Array.from({ length: n * n }, (_, i) => Math.sin(i) * 0.5);
    const bv = Float32Array.from({ length: n * n }, (_, i) => Math.cos(i * 0.7) * 0.5);
    const a = Tensor.fromArray(d0, av, [n, n], { stream: s });
    const b = Tensor.fromArray(d0, bv, [n, n], { stream: s });
    const fast = matmul(a, b, { stream: s });
    const viaObjects = Tensor.empty(d0, [n, n], 'fp32');
    s.native.matmul(0, 0, a.buffer, 0, b.buffer, 0, viaObjects.buffer, 0, 1, n, n, n, false, false, 0, 0);
    expect(Array.from(await fast.toArray({ stream: s }))).toEqual(Array.from(await viaObjects.toArray({ stream: s })));
    for (const t of [a, b, fast, viaObjects]) t.release();
    s.destroy();
  });
});
