/**
 * The multi-tensor kernels (K.adamwMulti, K.sumSquares; native/model_ops_multi.inc): one op
 * over a list must be bitwise the single ops it replaces, over many sizes (vector bodies and
 * scalar tails, unaligned views into one buffer as FSDP2's shards are), for both impls; a bad
 * entry must be rejected naming its index, with nothing enqueued and nothing written.
 */
import { describe, expect, it } from 'vitest';
import { Device, Tensor, add, cast, copy, matmul, type KernelImpl, type Stream } from '../src/runtime/device/device-index.js';
import { viewOf } from '../src/runtime/device/views.js';
import { InvalidStateError } from '../src/runtime/errors.js';
import * as K from '../src/model/kernels/index.js';
import { sumSquares as gradSumSquares } from '../src/train/grad-norm.js';
import { expectEachRefused } from './helpers/refused.js';

const d = Device.get(0);
const IMPLS: KernelImpl[] = ['fast', 'reference'];
/** Every tail length of the 8-wide AVX2 body, around block sizes, and long ones. */
const SIZES = [1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 23, 31, 32, 33, 63, 64, 65, 127, 129, 255, 257, 511, 513, 1000, 1023, 1025, 4099, 20_001, 70_003];

function rand(n: number, seed: number, scale = 1): Float32Array {
  let x = seed >>> 0 || 1;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out[i] = ((x / 2 ** 32) * 2 - 1) * scale;
  }
  return out;
}

async function bits(t: Tensor, stream?: Stream): Promise<Uint32Array> {
  const a = (await t.toArray({ stream })) as Float32Array;
  return new Uint32Array(a.buffer, a.byteOffset, a.length);
}

/**
 * `sizes.length` groups of four [n] fp32 tensors holding the same data for every call: as views at
 * odd element offsets into one shared buffer per role (unaligned, as shards of a flat unit), or,
 * with `own`, each a tensor of its own.
 */
function makeEntries(sizes: readonly number[], seed: number, own: boolean): { entries: K.AdamWEntry[]; release: () => void } {
  const roles = ['param', 'grad', 'm', 'v'] as const;
  const entries = sizes.map(() => ({}) as K.AdamWEntry);
  const owned: Tensor[] = [];
  for (const [k, role] of roles.entries()) {
    const data = sizes.map((n, i) => {
      const x = rand(n, seed * 1000 + i * 10 + k, role === 'grad' ? 0.5 : 1);
      return role === 'v' ? x.map((y) => y * y) : x;
    });
    if (own) {
      for (const [i, x] of data.entries()) owned.push((entries[i]![role] = Tensor.fromArray(d, x, [x.length])));
      continue;
    }
    // One buffer, each entry one element after the previous one's end: offsets of every residue mod 8.
    let at = 1;
    const offsets = data.map((x) => {
      const o = at;
      at += x.length + 1;
      return o;
    });
    const flat = new Float32Array(at);
    for (const [i, x] of data.entries()) flat.set(x, offsets[i]);
    const whole = Tensor.fromArray(d, flat, [at]);
    owned.push(whole);
    for (const [i, x] of data.entries()) entries[i]![role] = viewOf(whole, [x.length], offsets[i]);
  }
  return { entries, release: () => owned.forEach((t) => t.release()) };
}

describe('adamwMulti', () => {
  for (const impl of IMPLS) {
    for (const own of [false, true]) {
      it(`is bitwise one adamw per entry over ${SIZES.length} sizes, 3 steps (${impl}, ${own ? 'own buffers' : 'views into one buffer'})`, async () => {
        const hp = { lr: 3e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, impl };
        const single = makeEntries(SIZES, 7, own);
        const multi = makeEntries(SIZES, 7, own);
        for (let step = 1; step <= 3; step++) {
          // New gradients each step, the same for both.
          for (const [i, n] of SIZES.entries()) {
            const g = rand(n, 99 + step * 100 + i, 0.5);
            for (const e of [single.entries[i]!, multi.entries[i]!]) {
              const up = Tensor.fromArray(d, g, [n]);
              copy(e.grad, up);
              up.release();
            }
          }
          for (const e of single.entries) K.adamw(e.param, e.grad, e.m, e.v, { ...hp, step });
          K.adamwMulti(multi.entries, { ...hp, step });
        }
        let changed = false;
        for (const [i, n] of SIZES.entries()) {
          for (const role of ['param', 'm', 'v'] as const) {
            const a = await bits(single.entries[i]![role]),
              b = await bits(multi.entries[i]![role]);
            expect(b, `${role}[${i}] (n = ${n})`).toEqual(a);
          }
          const p0 = new Uint32Array(rand(n, 7 * 1000 + i * 10).buffer);
          changed ||= !(await bits(single.entries[i]!.param)).every((x, j) => x === p0[j]);
        }
        expect(changed, 'the steps moved the parameters').toBe(true);
        single.release();
        multi.release();
      }, 60_000);
    }
  }

  it('is one stream op for the whole list; an empty list or an empty entry is fine', async () => {
    const { entries, release } = makeEntries([3, 0, 17], 3, true);
    const stream = d.newStream();
    const before = stream.stats().enqueued;
    K.adamwMulti(entries, { lr: 1e-3, step: 1, stream });
    expect(stream.stats().enqueued - before).toBe(1);
    K.adamwMulti([], { lr: 1e-3, step: 1, stream });
    expect(stream.stats().enqueued - before).toBe(1);
    await stream.synchronize();
    stream.destroy();
    release();
  });

  it('rejects a bad entry naming its index, enqueuing nothing and writing nothing', async () => {
    await d.defaultStream.synchronize();
    const { entries, release } = makeEntries([4, 6, 5], 11, true);
    const snapshot = await Promise.all(entries.map((e) => bits(e.param)));
    const bf16 = cast(entries[1]!.grad, 'bf16');
    const wide = Tensor.zeros(d, [2, 3]);
    const transposed = new Tensor(d, wide.buffer, 'fp32', [3, 2], [1, 3]);
    const dead = Tensor.zeros(d, [6]);
    dead.release();
    const d1 = Device.get(1);
    const other = Tensor.zeros(d1, [6]);
    const hp = { lr: 1e-3, step: 1 };
    const withEntry = (i: number, e: Partial<K.AdamWEntry>): K.AdamWEntry[] => entries.map((x, j) => (j === i ? { ...x, ...e } : x));
    const cases: [() => unknown, RegExp][] = [
      [() => K.adamwMulti('no' as never, hp), /adamwMulti\(\) expects an array of \{ param, grad, m, v \} but received/],
      [() => K.adamwMulti([entries[0]!, 3 as never], hp), /expects list\[1\] to be \{ param, grad, m, v \}/],
      [() => K.adamwMulti(withEntry(1, { grad: bf16 }), hp), /expects grad\[1\] of dtype fp32 but received bf16/],
      [() => K.adamwMulti(withEntry(2, { m: undefined as never }), hp), /expects a Tensor for m\[2\]/],
      [() => K.adamwMulti(withEntry(1, { v: transposed }), hp), /tensor v\[1\] must be contiguous/],
      [() => K.adamwMulti(withEntry(2, { m: entries[1]!.m }), hp), /expects m\[2\] of shape \[shape of param\[2\]\] = \[5\] but received \[6\]/],
      [() => K.adamwMulti(withEntry(1, { grad: other }), hp), /expects tensors on device 0 but grad\[1\] is on device 1/],
      [() => K.adamwMulti(entries, { lr: 1e-3, step: 0 }), /expects an integer >= 1 for step/],
      [() => K.adamwMulti(entries, { lr: -1, step: 1 }), /finite number >= 0 for lr/],
      [() => K.adamwMulti(entries, { lr: 1e-3, step: 1, bogus: 1 } as never), /bogus/],
      [() => K.adamwMulti(entries, undefined as never), /requires options/],
      // Aliasing (the native check, every pair of the list): a written tensor shared with any other.
      [() => K.adamwMulti(withEntry(1, { m: entries[1]!.v }), hp), /m\[1\] overlaps v\[1\]|v\[1\] overlaps m\[1\]/],
      // Entry 1 listed twice: whichever written tensor the sweep meets first is named.
      [() => K.adamwMulti([...entries, entries[1]!], hp), /\b(param|m|v)\[(1|3)\] overlaps (param|grad|m|v)\[(1|3)\]/],
    ];
    // A gradient that is another entry's parameter (same shape): written by one, read by the other.
    const [a, b] = [Tensor.zeros(d, [5]), Tensor.zeros(d, [5])];
    const pairs = [
      { param: a, grad: b, m: Tensor.zeros(d, [5]), v: Tensor.zeros(d, [5]) },
      { param: Tensor.zeros(d, [5]), grad: a, m: Tensor.zeros(d, [5]), v: Tensor.zeros(d, [5]) },
    ];
    cases.push([() => K.adamwMulti(pairs, hp), /param\[0\] overlaps grad\[1\]/]);
    const enq = d.defaultStream.stats().enqueued,
      allocs = d.stats().numAllocs;
    expectEachRefused(cases);
    // A released tensor is a state error, named too.
    expect(() => K.adamwMulti(withEntry(1, { v: dead }), hp)).toThrow(InvalidStateError);
    expect(() => K.adamwMulti(withEntry(1, { v: dead }), hp)).toThrow(/v\[1\].*released/);
    expect(d.defaultStream.stats().enqueued).toBe(enq);
    expect(d.stats().numAllocs).toBe(allocs);
    // Gradients may be shared (read only), as with single ops.
    const shared = [
      { param: Tensor.zeros(d, [5]), grad: b, m: Tensor.zeros(d, [5]), v: Tensor.zeros(d, [5]) },
      { param: Tensor.zeros(d, [5]), grad: b, m: Tensor.zeros(d, [5]), v: Tensor.zeros(d, [5]) },
    ];
    K.adamwMulti(shared, hp);
    for (const [i, e] of entries.entries()) expect(await bits(e.param), `param[${i}] untouched`).toEqual(snapshot[i]);
    for (const t of [bf16, wide, other, a, b, ...pairs.flatMap((p) => [p.m, p.v, p.param]), ...shared.flatMap((p) => [p.param, p.m, p.v])]) t.release();
    release();
  });

  it('the native safety net names the entry: bounds and alignment', () => {
    const { entries, release } = makeEntries([4, 6], 5, true);
    const s = d.defaultStream;
    const call = (n1: number, vOff1: number) => {
      const args: unknown[] = [2, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1];
      for (const [i, e] of entries.entries()) {
        args.push(i === 1 ? n1 : 4, e.param.buffer, 0, e.grad.buffer, 0, e.m.buffer, 0, e.v.buffer, i === 1 ? vOff1 : 0);
      }
      (s.native.modelOp as unknown as (...a: unknown[]) => number)('adamwMulti', ...args, 0, 0);
    };
    expect(() => call(100, 0)).toThrow(/param\[1\] needs bytes \[0, 400\)/);
    expect(() => call(6, 2)).toThrow(/offset 2 of v\[1\] is not a multiple of the element size 4/);
    release();
  });
});

/** The squared norm as grad-norm.ts computed it before sumSquares was one op: a 1x1 matmul per tensor, then adds in order. */
function chainedSumSquares(tensors: readonly Tensor[], impl: KernelImpl): Tensor {
  let acc: Tensor | null = null;
  for (const g of tensors) {
    if (g.numel === 0) continue;
    const row = g.reshape([1, g.numel]);
    const s = matmul(row, row, { transB: true, impl });
    if (acc === null) acc = s;
    else {
      const next = add(acc, s);
      acc.release();
      s.release();
      acc = next;
    }
  }
  return acc!;
}

describe('sumSquares', () => {
  for (const impl of IMPLS) {
    it(`is bitwise the per-tensor matmul and add chain over ${SIZES.length} sizes (${impl})`, async () => {
      const { entries, release } = makeEntries(SIZES, 21, false);
      const list = entries.flatMap((e) => [e.grad, e.param]);
      const want = chainedSumSquares(list, impl);
      const got = K.sumSquares(list, { impl });
      expect(got.shape).toEqual([1, 1]);
      expect(await bits(got)).toEqual(await bits(want));
      // Each prefix, too (the first sum taken as it is, then one add each).
      for (const k of [1, 2, 3, 9]) {
        const [a, b] = [K.sumSquares(list.slice(0, k), { impl }), chainedSumSquares(list.slice(0, k), impl)];
        expect(await bits(a), `prefix ${k}`).toEqual(await bits(b));
        a.release();
        b.release();
      }
      for (const t of [want, got]) t.release();
      release();
    }, 60_000);
  }

  it('skips empty tensors, is one op, and the grad-norm helper returns null when nothing has elements', async () => {
    const x = Tensor.fromArray(d, Float32Array.from([1, -2, 3]), [3]);
    const empty = Tensor.zeros(d, [0]);
    const stream = d.newStream();
    const before = stream.stats().enqueued;
    const s = K.sumSquares([empty, x, empty, x], { stream });
    expect(stream.stats().enqueued - before).toBe(1);
    expect(Array.from((await s.toArray({ stream })) as Float32Array)).toEqual([28]);
    expect(gradSumSquares([empty, empty], stream)).toBeNull();
    expect(gradSumSquares([], stream)).toBeNull();
    await stream.synchronize();
    stream.destroy();
    for (const t of [x, empty, s]) t.release();
  });

  it('rejects a bad tensor naming its index, enqueuing and allocating nothing', async () => {
    await d.defaultStream.synchronize();
    const x = Tensor.zeros(d, [2, 3]);
    const bf16 = cast(x, 'bf16');
    const dead = Tensor.zeros(d, [3]);
    dead.release();
    const other = Tensor.zeros(Device.get(1), [3]);
    const empty = Tensor.zeros(d, [0]);
    const cases: [() => unknown, RegExp][] = [
      [() => K.sumSquares(x as never), /sumSquares\(\) expects an array of tensors/],
      [() => K.sumSquares([]), /needs at least one tensor with elements but received 0 tensors/],
      [() => K.sumSquares([empty, empty]), /needs at least one tensor with elements but received 2 tensors/],
      [() => K.sumSquares([x, bf16]), /expects tensors\[1\] of dtype fp32 but received bf16/],
      [() => K.sumSquares([x, new Tensor(d, x.buffer, 'fp32', [3, 2], [1, 3])]), /tensor tensors\[1\] must be contiguous/],
      [() => K.sumSquares([x, 5 as never]), /expects a Tensor for tensors\[1\]/],
      [() => K.sumSquares([x, other]), /expects tensors on device 0 but tensors\[1\] is on device 1/],
      [() => K.sumSquares([x], { bogus: 1 } as never), /bogus/],
    ];
    const enq = d.defaultStream.stats().enqueued,
      allocs = d.stats().numAllocs;
    expectEachRefused(cases);
    expect(() => K.sumSquares([x, x, dead])).toThrow(InvalidStateError);
    expect(() => K.sumSquares([x, x, dead])).toThrow(/tensors\[2\].*released/);
    expect(d.defaultStream.stats().enqueued).toBe(enq);
    expect(d.stats().numAllocs).toBe(allocs);
    // The native net: an output aliasing an input is named.
    const call = () =>
      (d.defaultStream.native.modelOp as unknown as (...a: unknown[]) => number)('sumSquares', 2, x.buffer, 4, 3, x.buffer, 0, 3, x.buffer, 12, 0, 0);
    expect(call).toThrow(/out overlaps tensors\[0\]/);
    for (const t of [x, bf16, other, empty]) t.release();
  });
});
