/**
 * The matmul wrapper's own fast paths keep its contract: its options check accepts exactly what
 * checkOptions accepts (own keys of a plain object; inherited ones are not checked) and refuses the
 * rest with the same message; its output has a frozen shape and contiguous strides that no caller
 * holds: a 2-D output reuses the frozen layout of the previous 2-D output of the same dims (shared
 * only between tensors, which cannot change it), any other dims get a layout of their own.
 */
import { describe, expect, it } from 'vitest';
import { Device, Tensor, matmul } from '../src/runtime/device/device-index.js';
import { InvalidArgumentError } from '../src/runtime/errors.js';
import { BUFFER_HANDLE, loadNative } from '../src/runtime/native.js';

const d0 = Device.get(0);

describe('matmul wrapper', () => {
  it('options: unknown keys, non-objects and arrays are refused with checkOptions words; inherited keys are not checked', async () => {
    const a = Tensor.fromArray(d0, [1, 2, 3, 4, 5, 6], [2, 3]);
    const b = Tensor.fromArray(d0, [1, 0, 0, 1, 1, 1], [3, 2]);
    const refused: Array<[unknown, RegExp]> = [
      [{ transb: true }, /^Unknown option 'transb' for matmul\(\)\. Did you mean 'trans[AB]'\? Expected one of: stream, impl, transA, transB, outDtype\.$/],
      [{ transA: false, strem: 1 }, /^Unknown option 'strem' for matmul\(\)\. Did you mean 'stream'\?/],
      [7, /^Expected an options object for matmul\(\) but received /],
      [null, /^Expected an options object for matmul\(\) but received /],
      [[], /^Expected an options object for matmul\(\)/],
    ];
    const before = d0.stats().numAllocs;
    for (const [options, message] of refused) {
      let caught: unknown;
      try {
        matmul(a, b, options as never);
      } catch (e) {
        caught = e;
      }
      expect(caught, JSON.stringify(options)).toBeInstanceOf(InvalidArgumentError);
      expect((caught as Error).message).toMatch(message);
    }
    // Nothing was allocated by a refused call.
    expect(d0.stats().numAllocs).toBe(before);
    // An inherited enumerable key is not checked as an option (as with Object.keys).
    const inherited = Object.create({ bogus: 1 }) as { transA: boolean };
    inherited.transA = false;
    const c = matmul(a, b, inherited);
    expect(Array.from(await c.toArray())).toEqual([4, 5, 10, 11]);
    for (const t of [a, b, c]) t.release();
  });

  it('the output: shape [m, n] or [batch, m, n], frozen, contiguous, never an array a caller holds', async () => {
    const a = Tensor.fromArray(d0, [1, 2, 3, 4, 5, 6], [2, 3]);
    const b = Tensor.fromArray(d0, [1, 0, 0, 1, 1, 1], [3, 2]);
    const c1 = matmul(a, b);
    const c2 = matmul(a, b, { transA: false });
    expect(c1.shape).toEqual([2, 2]);
    expect(c1.strides).toEqual([2, 1]);
    expect(c1.numel).toBe(4);
    expect(c1.isContiguous).toBe(true);
    expect(Object.isFrozen(c1.shape)).toBe(true);
    expect(Object.isFrozen(c1.strides)).toBe(true);
    expect(c1.shape).not.toBe(a.shape);
    expect(c1.shape).not.toBe(b.shape);
    expect(() => (c1.shape as number[]).push(1)).toThrow(TypeError);
    expect(() => ((c1.strides as number[])[0] = 7)).toThrow(TypeError);
    expect(c1.strides).toEqual([2, 1]);
    expect(Array.from(await c2.toArray())).toEqual([4, 5, 10, 11]);
    const ab = Tensor.fromArray(d0, new Float32Array(2 * 2 * 3).fill(1), [2, 2, 3]);
    const bb = Tensor.fromArray(d0, new Float32Array(2 * 3 * 4).fill(2), [2, 3, 4]);
    const cb = matmul(ab, bb);
    expect(cb.shape).toEqual([2, 2, 4]);
    expect(cb.strides).toEqual([8, 4, 1]);
    expect(Object.isFrozen(cb.shape)).toBe(true);
    expect(Array.from(await cb.toArray())).toEqual(new Array(16).fill(6));
    for (const t of [a, b, c1, c2, ab, bb, cb]) t.release();
  });

  it('2-D outputs of the same dims share one frozen layout; other dims, in any order, get their own', async () => {
    const a = Tensor.fromArray(d0, [1, 2, 3, 4, 5, 6], [2, 3]);
    const b = Tensor.fromArray(d0, [1, 0, 0, 1, 1, 1], [3, 2]);
    const c1 = matmul(a, b);
    const c2 = matmul(a, b);
    // The same frozen arrays: no shape or strides built or frozen again for a repeated shape.
    expect(c2.shape).toBe(c1.shape);
    expect(c2.strides).toBe(c1.strides);
    const t1 = matmul(a, b, { transA: true, transB: true }); // [3, 3]
    expect(t1.shape).toEqual([3, 3]);
    expect(t1.strides).toEqual([3, 1]);
    expect(t1.shape).not.toBe(c1.shape);
    const c3 = matmul(a, b);
    expect(c3.shape).toEqual([2, 2]);
    expect(c3.strides).toEqual([2, 1]);
    // Earlier outputs keep their dims whatever was built since.
    expect(c1.shape).toEqual([2, 2]);
    expect(t1.shape).toEqual([3, 3]);
    expect(Object.isFrozen(c3.shape) && Object.isFrozen(t1.strides)).toBe(true);
    expect(Array.from(await t1.toArray())).toEqual([1, 4, 5, 2, 5, 7, 3, 6, 9]);
    expect(Array.from(await c3.toArray())).toEqual([4, 5, 10, 11]);
    for (const t of [a, b, c1, c2, t1, c3]) t.release();
  });

  it('tensors made by the constructor still copy the caller’s shape and strides', () => {
    const shape = [2, 3];
    const t = Tensor.empty(d0, shape);
    shape[0] = 5;
    expect(t.shape).toEqual([2, 3]);
    expect(t.shape).not.toBe(shape);
    const v = t.reshape([3, 2]);
    expect(v.shape).toEqual([3, 2]);
    expect(v.isContiguous).toBe(true);
    t.release();
  });

  it('the native call makes the output: one block per call, none for a refused call, kept alive while the op waits in the queue', async () => {
    const s = d0.newStream();
    try {
      const a = Tensor.fromArray(d0, [1, 2, 3, 4, 5, 6], [2, 3], { stream: s });
      const b = Tensor.fromArray(d0, [1, 0, 0, 1, 1, 1], [3, 2], { stream: s });
      await s.synchronize();
      const before = d0.stats().numAllocs;
      // Refused natively (A holds 6 floats, m x k = 3 x 3 needs 9): nothing allocated, nothing enqueued.
      const enqueued = s.stats().enqueued;
      expect(() => s.native.matmul(0, 0, a.buffer[BUFFER_HANDLE], 0, b.buffer[BUFFER_HANDLE], 0, null, 0, 1, 3, 2, 3, false, false, 0, 0)).toThrow(/a/);
      expect(d0.stats().numAllocs).toBe(before);
      expect(s.stats().enqueued).toBe(enqueued);
      // c = null: the call returns the handle of the block it made (one more live allocation).
      const handle = s.native.matmul(0, 0, a.buffer[BUFFER_HANDLE], 0, b.buffer[BUFFER_HANDLE], 0, null, 0, 1, 2, 2, 3, false, false, 0, 0);
      expect(d0.stats().numAllocs).toBe(before + 1);
      loadNative().releaseBuffer(handle);
      expect(d0.stats().numAllocs).toBe(before);
      // Inline (the stream is idle): the output is made, written and owned by the returned tensor.
      const inlined = s.stats().inlined;
      const c1 = matmul(a, b, { stream: s });
      expect(s.stats().inlined).toBe(inlined + 1);
      expect(d0.stats().numAllocs).toBe(before + 1);
      expect(c1.buffer.size).toBe(16);
      expect(c1.buffer.device).toBe(0);
      expect(Array.from(await c1.toArray({ stream: s }))).toEqual([4, 5, 10, 11]);
      // Queued behind a sleep: the output is released by JS before the op runs, and the op still
      // writes a live block (the queued op holds it); a later matmul reads the right values.
      s.sleep(30);
      const queuedFrom = s.stats().inlined;
      const c2 = matmul(a, b, { stream: s, transB: false });
      expect(s.stats().inlined).toBe(queuedFrom);
      c2.release();
      const c3 = matmul(a, b, { stream: s });
      expect(Array.from(await c3.toArray({ stream: s }))).toEqual([4, 5, 10, 11]);
      for (const t of [a, b, c1, c3]) t.release();
      await s.synchronize();
      expect(d0.stats().numAllocs).toBe(before - 2);
    } finally {
      s.destroy();
    }
  });
});
