/**
 * The model kernels pass each tensor's native buffer handle to stream.modelOp, not the buffer
 * object: native reads a handle directly, an object costs a property lookup per argument, and a
 * decode step enqueues several ops per layer and token. The ops still compute the same values.
 */
import { describe, expect, it } from 'vitest';
import { Device, Tensor } from '../src/runtime/device/device-index.js';
import { DeviceBuffer } from '../src/runtime/device/buffer.js';
import { BUFFER_HANDLE } from '../src/runtime/native.js';
import * as K from '../src/model/kernels/index.js';

const d0 = Device.get(0);

describe('model kernels pass buffer handles to native', () => {
  it('rmsNorm, addRmsNorm, swigluFused, embedding and sumSquares enqueue handles only', async () => {
    const s = d0.newStream();
    const calls: unknown[][] = [];
    const native = s.native as unknown as { modelOp: (...a: unknown[]) => unknown };
    const real = native.modelOp.bind(s.native);
    // The native method is read-only on the prototype: shadow it on this stream's instance.
    Object.defineProperty(native, 'modelOp', {
      value: (...args: unknown[]) => {
        calls.push(args);
        return real(...args);
      },
    });
    const f32 = (v: number[], shape: number[]) => Tensor.fromArray(d0, Float32Array.from(v), shape, { stream: s });
    const x = f32([3, 4, 0, 0], [2, 2]);
    const w = f32([1, 2], [2]);
    const ids = Tensor.fromArray(d0, Int32Array.from([1, 0]), [2], { stream: s });
    const opts = { stream: s };
    const norm = K.rmsNorm(x, w, 0, opts);
    const added = K.addRmsNorm(x, x, w, 0, opts);
    const act = K.swigluFused(x, opts);
    const emb = K.embedding(ids, x, opts);
    const sq = K.sumSquares([x, w], opts);
    const names = calls.map((c) => c[0]);
    expect(names).toEqual(['rmsNorm', 'addRmsNorm', 'swiglu', 'embedding', 'sumSquares']);
    const inputs = [x, w, ids].map((t) => t.buffer[BUFFER_HANDLE]);
    const outputs = [norm.y, norm.rstd, added.sum, added.y, act, emb, sq].map((t) => t.buffer[BUFFER_HANDLE]);
    for (const args of calls) {
      const objects = args.filter((a) => a instanceof DeviceBuffer);
      expect(objects, `${String(args[0])} passed buffer objects`).toEqual([]);
      expect(
        args.some((a) => inputs.includes(a as never)),
        `${String(args[0])} passed no input handle`,
      ).toBe(true);
      expect(
        args.some((a) => outputs.includes(a as never)),
        `${String(args[0])} passed no output handle`,
      ).toBe(true);
    }
    // Row [3, 4]: rms = sqrt(12.5); y = x / rms * w. Row [0, 0] stays 0 (eps 0 gives rstd inf, 0 * inf is NaN: skip it).
    const y = await norm.y.toArray({ stream: s });
    expect(y[0]).toBeCloseTo(3 / Math.sqrt(12.5), 5);
    expect(y[1]).toBeCloseTo((4 / Math.sqrt(12.5)) * 2, 5);
    expect(Array.from(await emb.toArray({ stream: s }))).toEqual([0, 0, 3, 4]);
    expect((await sq.toArray({ stream: s }))[0]).toBeCloseTo(9 + 16 + 1 + 4, 4);
    for (const t of [x, w, ids, norm.y, norm.rstd, added.sum, added.y, act, emb, sq]) t.release();
    s.destroy();
  });
});
