import { describe, expect, it } from 'vitest';
import { Device, Tensor, add, axpy, copyPeer, loadNative, matmul } from '../src/runtime/device/device-index.js';
import { InvalidArgumentError } from '../src/runtime/errors.js';

const d0 = Device.get(0);
const d1 = Device.get(1);

function snapshot(...streams: { stats(): { enqueued: number }; pending(): unknown[] }[]) {
  return {
    dev0: d0.stats(),
    dev1: d1.stats(),
    streams: streams.map((s) => [s.stats().enqueued, s.pending().length]),
  };
}

describe('wrong device or stream', () => {
  it('throws InvalidArgumentError synchronously with no side effect (TS layer)', () => {
    const s0 = d0.newStream();
    const a = Tensor.empty(d0, [16]);
    const b = Tensor.empty(d1, [16]);
    const before = snapshot(s0, d0.defaultStream, d1.defaultStream);
    let err: unknown;
    try {
      add(a, b, { stream: s0 });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as InvalidArgumentError).code).toBe('ASCENT_INVALID_ARGUMENT');
    expect((err as Error).message).toBe(
      'Expected tensors on device 0 but b is on device 1 (stream belongs to device 0). HINT: use copyPeer() to move it first.',
    );
    expect((err as InvalidArgumentError).details).toMatchObject({ argument: 'b', expectedDevice: 0, actualDevice: 1 });
    expect(() => matmul(Tensor.empty(d1, [2, 2]), Tensor.empty(d1, [2, 2]), { stream: s0 })).toThrow(/but a is on device 1/);
    expect(() => axpy(a, 1, b)).toThrow(InvalidArgumentError);
    const s1 = d1.newStream();
    expect(() => d0.newEvent().record(s1)).toThrow(/belongs to device 1/);
    // Nothing was enqueued and no device-0 memory was left behind by the failed calls.
    expect(snapshot(s0, d0.defaultStream, d1.defaultStream).streams).toEqual(before.streams);
    expect(d0.stats().allocated).toBe(before.dev0.allocated);
    expect(d0.stats().numAllocs).toBe(before.dev0.numAllocs);
    s0.destroy();
    s1.destroy();
  });

  it('native entry points reject another device or out-of-bounds ranges before enqueueing', () => {
    const native = loadNative();
    const s0 = d0.newStream();
    const buf0 = d0.alloc(64);
    const buf1 = d1.alloc(64);
    const before = snapshot(s0);
    let err: unknown;
    try {
      s0.native.binary(0, 0, buf0, 0, buf0, 0, buf1, 0, 16, 0, 0);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toBe(
      'Expected buffers on device 0 but b is on device 1 (stream belongs to device 0). HINT: use copyPeer() to move it first.',
    );
    expect((err as InvalidArgumentError).details).toMatchObject({ argument: 'b', actualDevice: 1, streamDevice: 0 });
    expect(() => s0.native.fill(buf0, 0, 17, 0, 1, 0, 0)).toThrow(/Out of bounds: dst needs bytes \[0, 68\) but buffer \d+ has 64 bytes/);
    expect(() => s0.native.fill(buf0, 2, 1, 0, 1, 0, 0)).toThrow(/not a multiple of the element size/);
    expect(() => s0.native.copyD2H(buf0, 60, 8, 0)).toThrow(InvalidArgumentError);
    expect(() => s0.native.copyH2D(buf0, 0, new Uint8Array(65), 0)).toThrow(InvalidArgumentError);
    expect(() => s0.native.matmul(0, 0, buf0, 0, buf0, 0, buf0, 0, 1, 2, 2, 2, false, false, 0, 0)).toThrow(/overlaps/);
    expect(() => s0.native.permute(4, buf0, 0, buf0, 0, [4, 4], [4, 1], 0, 0)).toThrow(InvalidArgumentError);
    expect(() => native.importBuffer(123456789)).toThrow(/does not exist/);
    expect(snapshot(s0)).toEqual(before);
    buf0.release();
    buf1.release();
    s0.destroy();
  });

  it('copyPeer is the one op that moves data between devices', async () => {
    const src = Tensor.fromArray(d1, [1, 2, 3, 4], [4]);
    const dst = Tensor.zeros(d0, [4]);
    await d1.defaultStream.synchronize();
    copyPeer(dst, src);
    expect(Array.from(await dst.toArray())).toEqual([1, 2, 3, 4]);
    const d2 = Device.get(2);
    expect(() => copyPeer(dst, src, { stream: d2.defaultStream })).toThrow(/needs a stream of one of them but the stream belongs to device 2/);
  });

  it('rejects released tensors, misspelled options and bad arguments', () => {
    const t = Tensor.empty(d0, [4]);
    t.release();
    expect(() => add(t, t)).toThrow(/Tensor a was released/);
    const u = Tensor.empty(d0, [4]);
    expect(() => add(u, u, { imp: 'fast' } as never)).toThrow(/Unknown option 'imp' for add\(\)\. Did you mean 'impl'\? Expected one of: stream, impl/);
    // No suggestion when nothing is close.
    expect(() => add(u, u, { zzzzzzzz: 1 } as never)).toThrow(/Unknown option 'zzzzzzzz' for add\(\)\. Expected one of/);
    expect(() => add(u, u, { impl: 'slow' as never })).toThrow(/Expected 'fast' or 'reference' for impl but received 'slow' of type string/);
    expect(() => Tensor.empty(d0, [4], 'float32' as never)).toThrow(/HINT: did you mean 'fp32'\?/);
    expect(() => Tensor.fromArray(d0, [1, 2, 3], [2, 2])).toThrow(/Expected 4 elements for shape \[2, 2\] but received 3/);
    expect(() => Device.get(-1)).toThrow(InvalidArgumentError);
  });
});
