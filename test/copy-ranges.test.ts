// copyRanges (native/copy_ranges_op.cc, src/runtime/device/copy-ranges.ts): a list of
// device-to-device copies as one stream op. Held to one copy() per range (bitwise, in order),
// to its checks (a bad range names its index, nothing is enqueued, nothing copied), to the
// buffer lifetimes of copy() and to its single trace event.
import { describe, expect, it } from 'vitest';
import { Device, Tensor, copy, type Stream } from '../src/runtime/device/device-index.js';
import { CopyRanges } from '../src/runtime/device/copy-ranges.js';
import { viewOf } from '../src/runtime/device/views.js';
import { InvalidArgumentError } from '../src/runtime/errors.js';

/** dst[d, d + n) <- src[s, s + n) for every (d, s, n) triple, as one CopyRanges op. */
function copyRanges(dst: Tensor, src: Tensor, triples: readonly number[], stream: Stream): void {
  const list = new CopyRanges();
  for (let i = 0; i < triples.length; i += 3) list.add(dst, triples[i]!, src, triples[i + 1]!, triples[i + 2]!);
  list.enqueue(stream);
}

const d = Device.get(0);

function rng(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return x / 2 ** 32;
  };
}

function ints(n: number, seed: number): Int32Array {
  const r = rng(seed);
  return Int32Array.from({ length: n }, () => Math.floor(r() * 2 ** 31) - 2 ** 30);
}

async function read(t: Tensor, stream?: Stream): Promise<Int32Array> {
  return (await t.toArray({ stream })) as Int32Array;
}

/** `fn` throws InvalidArgumentError whose message names range `index`. */
function expectRangeError(fn: () => void, index: number, what: RegExp): void {
  let err: unknown;
  try {
    fn();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(InvalidArgumentError);
  expect((err as Error).message).toMatch(new RegExp(`range ${index}\\b`));
  expect((err as Error).message).toMatch(what);
}

describe('copyRanges', () => {
  it('equals one copy() per range, in order, for hundreds of ranges over several buffers, as one op', async () => {
    const s = d.newStream();
    const o = { stream: s };
    const srcs = [Tensor.fromArray(d, ints(5000, 1), [5000], o), Tensor.fromArray(d, ints(3000, 2), [3000], o)];
    const dstInit = ints(4000, 3);
    const viaList = [Tensor.fromArray(d, dstInit, [4000], o), Tensor.fromArray(d, dstInit, [4000], o)];
    const viaCopy = [Tensor.fromArray(d, dstInit, [4000], o), Tensor.fromArray(d, dstInit, [4000], o)];
    const r = rng(7);
    const ranges: Array<[number, number, number, number, number]> = [];
    for (let i = 0; i < 300; i++) {
      const di = i % 2,
        si = Math.floor(r() * 2);
      const n = i % 17 === 0 ? 0 : 1 + Math.floor(r() * 60);
      ranges.push([di, Math.floor(r() * (4000 - n)), si, Math.floor(r() * (srcs[si]!.numel - n)), n]);
    }
    const list = new CopyRanges();
    for (const [di, dof, si, sof, n] of ranges) list.add(viaList[di]!, dof, srcs[si]!, sof, n);
    // A later range reading what an earlier one wrote sees it (list order): the destinations as sources.
    list.add(viaList[1]!, 100, viaList[0]!, 500, 20).add(viaList[0]!, 3500, viaList[1]!, 100, 20);
    expect(list.length).toBe(ranges.length + 2);
    const before = s.stats().enqueued;
    list.enqueue(s);
    expect(s.stats().enqueued - before).toBe(1);
    expect(list.length).toBe(0);
    for (const [di, dof, si, sof, n] of ranges) {
      if (n) copy(viewOf(viaCopy[di]!, [n], dof), viewOf(srcs[si]!, [n], sof), o);
    }
    copy(viewOf(viaCopy[1]!, [20], 100), viewOf(viaCopy[0]!, [20], 500), o);
    copy(viewOf(viaCopy[0]!, [20], 3500), viewOf(viaCopy[1]!, [20], 100), o);
    for (let k = 0; k < 2; k++) expect(await read(viaList[k]!, s)).toEqual(await read(viaCopy[k]!, s));
    expect(await read(viaList[0]!, s)).not.toEqual(dstInit); // the copies did something
    for (const t of [...srcs, ...viaList, ...viaCopy]) t.release();
    s.destroy();
  });

  it('copies ranges of a MiB and more (streamed past the caches) exactly, at unaligned offsets, in order', async () => {
    const n = 3 * 2 ** 18 + 5; // 3 MiB + 20 bytes of int32
    const src = Tensor.fromArray(d, ints(n, 11), [n]);
    const init = ints(n + 64, 12);
    const dst = Tensor.fromArray(d, init, [n + 64]);
    const big = 2 ** 18 + 3; // 1 MiB + 12 bytes: over the streaming threshold
    // Two large ranges at offsets that are not multiples of 64 bytes, then a small one that
    // reads bytes the first large one just wrote (list order).
    new CopyRanges()
      .add(dst, 7, src, 1, big)
      .add(dst, 7 + big + 9, src, 2 * big - 10, big)
      .add(dst, 5, dst, 7 + 100, 30)
      .enqueue(d.defaultStream);
    const s = await read(src);
    const want = Int32Array.from(init);
    want.set(s.subarray(1, 1 + big), 7);
    want.set(s.subarray(2 * big - 10, 3 * big - 10), 7 + big + 9);
    want.set(want.subarray(7 + 100, 7 + 130), 5);
    const got = await read(dst);
    let wrong = 0;
    for (let i = 0; i < want.length; i++) if (got[i] !== want[i]) wrong++;
    expect(wrong).toBe(0);
    src.release();
    dst.release();
  });

  it('ranges in elements; zero-length ranges copy nothing', async () => {
    const src = Tensor.fromArray(d, ints(64, 4), [64]);
    const dst = Tensor.fromArray(d, new Int32Array(64), [64]);
    copyRanges(dst, src, [0, 60, 4, 8, 0, 8, 63, 63, 0, 64, 0, 0, 32, 10, 3], d.defaultStream);
    const want = new Int32Array(64);
    const s = await read(src);
    want.set(s.subarray(60, 64), 0);
    want.set(s.subarray(0, 8), 8);
    want.set(s.subarray(10, 13), 32);
    expect(await read(dst)).toEqual(want);
    src.release();
    dst.release();
  });

  it('rejects a bad range naming its index; nothing of the list is enqueued or copied', async () => {
    const s = d.newStream();
    const src = Tensor.fromArray(d, ints(100, 5), [100], { stream: s });
    const dst = Tensor.fromArray(d, new Int32Array(100), [100], { stream: s });
    const other = Tensor.fromArray(d, new Float32Array(100), [100], { stream: s });
    const bad: Array<[string, (l: CopyRanges) => void, RegExp]> = [
      ['dst out of bounds', (l) => l.add(dst, 90, src, 0, 11), /dst elements \[90, 101\) are outside/],
      ['src out of bounds', (l) => l.add(dst, 0, src, 100, 1), /src elements \[100, 101\) are outside/],
      ['negative offset', (l) => l.add(dst, -1, src, 0, 1), /dstOffset/],
      ['fractional count', (l) => l.add(dst, 0, src, 0, 1.5), /count/],
      ['dtype', (l) => l.add(other, 0, src, 0, 1), /int32/],
      ['overlap in one buffer', (l) => l.add(src, 10, src, 5, 10), /overlap/],
    ];
    for (const [what, addBad, msg] of bad) {
      const list = new CopyRanges().add(dst, 0, src, 0, 50).add(dst, 50, src, 50, 50);
      const before = s.stats().enqueued;
      expectRangeError(() => addBad(list), 2, msg);
      expect(s.stats().enqueued, what).toBe(before);
    }
    // The free function checks every triple before it enqueues any.
    const before = s.stats().enqueued;
    expectRangeError(() => copyRanges(dst, src, [0, 0, 10, 10, 10, 10, 95, 0, 10], s), 2, /outside/);
    expect(s.stats().enqueued).toBe(before);
    expect(await read(dst, s)).toEqual(new Int32Array(100));
    for (const t of [src, dst, other]) t.release();
    s.destroy();
  });

  it('the native op checks every range itself (a direct call): bad ranges name their index and enqueue nothing', async () => {
    const s = d.newStream();
    const a = d.alloc(256),
      b = d.alloc(128);
    const ok = [0, 0, 1, 0, 64];
    const cases: Array<[number[], RegExp]> = [
      [[0, 200, 1, 0, 64], /range 1 is out of bounds: its dst needs bytes \[200, 264\)/],
      [[0, 0, 1, 100, 64], /range 1 is out of bounds: its src needs bytes \[100, 164\)/],
      [[2, 0, 1, 0, 8], /range 1: dstBuffer 2 is not an index of buffers/],
      [[0, 0, 0, 32, 64], /range 1: its src bytes \[32, 96\) and dst bytes \[0, 64\) overlap/],
      [[0, 0.5, 1, 0, 8], /range 1: dstByteOffset must be a non-negative integer/],
      [[0, 0, 1, 0, -1], /range 1: nbytes must be a non-negative integer/],
    ];
    for (const [range, msg] of cases) {
      const before = s.stats().enqueued;
      let err: unknown;
      try {
        s.native.copyRanges([a, b], Float64Array.from([...ok, ...range]), 0);
      } catch (e) {
        err = e;
      }
      expect(err, msg.source).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message).toMatch(msg);
      expect(s.stats().enqueued).toBe(before);
    }
    expect(() => s.native.copyRanges([a, b], Float64Array.from([0, 0, 1, 0]), 0)).toThrow(/5 numbers per range/);
    expect(() => s.native.copyRanges([a, b], [0, 0, 1, 0, 8] as unknown as Float64Array, 0)).toThrow(/Float64Array/);
    a.release();
    b.release();
    s.destroy();
  });

  it('keeps its buffers alive until it ran, as copy() does (released right after enqueue behind a busy stream)', async () => {
    const s = d.newStream();
    const data = ints(256, 6);
    const src = Tensor.fromArray(d, data, [256], { stream: s });
    const dst = Tensor.fromArray(d, new Int32Array(256), [256], { stream: s });
    s.sleep(50);
    copyRanges(dst, src, [0, 128, 128, 128, 0, 128], s);
    src.release(); // pending: the op still reads it
    const got = await read(dst, s);
    expect([...got.subarray(0, 128)]).toEqual([...data.subarray(128)]);
    expect([...got.subarray(128)]).toEqual([...data.subarray(0, 128)]);
    dst.release();
    s.destroy();
  });

  it('is one trace event, copyRanges, with its range count and bytes', async () => {
    const s = d.newStream();
    s.native.profile(true);
    const src = Tensor.fromArray(d, ints(64, 8), [64], { stream: s });
    const dst = Tensor.zeros(d, [64], 'int32', { stream: s });
    copyRanges(dst, src, [0, 0, 10, 10, 10, 5, 40, 40, 0], s);
    await s.synchronize();
    const r = s.native.drainProfile();
    const i = r.names.indexOf('copyRanges');
    expect(i).toBeGreaterThanOrEqual(0);
    expect(r.names.filter((n) => n === 'copyRanges')).toHaveLength(1);
    expect(r.args[i]).toEqual({ ranges: 3, bytes: 60 });
    s.native.profile(false);
    src.release();
    dst.release();
    s.destroy();
  });
});
