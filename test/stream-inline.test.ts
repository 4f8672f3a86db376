// Inline ops (native/device/stream.h): a small kernel or copy that finds its stream idle runs on
// the enqueueing thread. These tests hold the same program to the queued path: the same bytes,
// the same order against events and other streams, the same errors.
import { describe, expect, it } from 'vitest';
import { Device, Tensor, add, arange, axpy, cast, copy, fill, matmul, mul, permute, scale, type Stream } from '../src/runtime/device/device-index.js';
import { StreamError } from '../src/runtime/errors.js';
import { enqueueWithCompletion } from '../src/runtime/native.js';
import * as K from '../src/model/kernels/index.js';

const d = Device.get(0);

function rand(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let x = seed >>> 0;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out[i] = x / 2 ** 31 - 1;
  }
  return out;
}

/** Lets `n` microtask turns pass: a completion posted through the event loop cannot arrive meanwhile. */
async function microtasks(n = 20): Promise<void> {
  for (let i = 0; i < n; i++) await Promise.resolve();
}

/** A small program of base and model ops on `s`; returns every result's bytes. */
async function program(s: Stream): Promise<Uint8Array[]> {
  const o = { stream: s };
  const a = Tensor.fromArray(d, rand(64 * 64, 1), [64, 64], o);
  const b = Tensor.fromArray(d, rand(64 * 64, 2), [64, 64], o);
  const w = Tensor.fromArray(d, rand(64, 3), [64], o);
  const c = matmul(a, b, { ...o, transB: true });
  const e = add(c, a, o);
  const f = mul(e, b, o);
  axpy(f, 0.25, a, o);
  const g = scale(f, -1.5, o);
  const h = permute(g, [1, 0], o);
  const i = cast(h, 'bf16', o);
  const r = arange(d, 100, { ...o, start: 3, step: 0.5 });
  const n = K.rmsNorm(h, w, 1e-6, o).y;
  const z = Tensor.empty(d, [64, 64], 'fp32');
  fill(z, 9, o);
  copy(z, n, o);
  const outs = [c, e, f, g, h, i, r, n, z];
  // Read back without waiting in between, so a stream held busy stays busy for the whole program.
  const hosts = await Promise.all(outs.map((t) => t.toArray(o)));
  for (const t of [a, b, w, ...outs]) t.release();
  return hosts.map((x) => new Uint8Array(x.buffer.slice(0)));
}

describe('inline ops', () => {
  it('give bit-identical results to the same ops queued behind a busy stream', async () => {
    const idle = d.newStream();
    const before = idle.stats().inlined;
    const inlineBytes = await program(idle);
    const ran = idle.stats().enqueued;
    // Every op of the program ran inline: toArray's reads and its synchronize markers too.
    expect(idle.stats().inlined - before).toBe(ran);

    const busy = d.newStream();
    busy.sleep(50); // everything after waits in the queue behind it
    const queuedBytes = await program(busy);
    expect(busy.stats().inlined).toBe(0);
    expect(queuedBytes).toEqual(inlineBytes);
    idle.destroy();
    busy.destroy();
  });

  it('keep stream order: an op behind a queued op queues too, and inline ops take their seq in order', async () => {
    const s = d.newStream();
    s.native.profile(true);
    const t = Tensor.zeros(d, [16], 'fp32', { stream: s }); // inline
    s.sleep(30); // never inline
    fill(t, 2, { stream: s }); // must not overtake the sleep (nor run before it)
    axpy(t, 1, t, { stream: s }); // t = 4 only if the fill ran first
    expect(s.pending().map((p) => p.op)).toEqual(['sleep', 'fill', 'axpy']);
    expect(Array.from(await t.toArray({ stream: s }))).toEqual(new Array(16).fill(4));
    const inlinedAfterQueue = s.stats().inlined;
    fill(t, 5, { stream: s }); // the stream is idle again: inline
    expect(s.stats().inlined).toBe(inlinedAfterQueue + 1);
    expect(s.pending()).toEqual([]);
    const p = s.native.drainProfile();
    const seqs = Array.from(p.seq);
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1)); // every op, each once, in order
    expect(p.names.slice(0, 4)).toEqual(['fill', 'sleep', 'fill', 'axpy']);
    for (let i = 1; i < seqs.length; i++) expect(p.start[i]!).toBeGreaterThanOrEqual(p.end[i - 1]!);
    t.release();
    s.destroy();
  });

  it('wait for events recorded on other streams: ops after a waitEvent queue behind it', async () => {
    const s1 = d.newStream();
    const s2 = d.newStream();
    const t = Tensor.zeros(d, [256], 'fp32', { stream: s1 });
    s1.sleep(40);
    fill(t, 7, { stream: s1 });
    const ev = s1.recordEvent();
    s2.waitEvent(ev);
    const inlined = s2.stats().inlined;
    const y = scale(t, 2, { stream: s2 }); // would read zeros if it ran inline now
    expect(s2.stats().inlined).toBe(inlined);
    expect((await y.toArray({ stream: s2 })).every((v) => v === 14)).toBe(true);
    // With the event complete, a waitEvent costs nothing and the next op may run inline again.
    s2.waitEvent(ev);
    await s2.synchronize();
    const z = scale(t, 3, { stream: s2 });
    expect(s2.stats().inlined).toBeGreaterThan(inlined);
    expect((await z.toArray({ stream: s2 })).every((v) => v === 21)).toBe(true);
    // An event recorded inline completes at once.
    const ev2 = s2.recordEvent();
    expect(ev2.query()).toBe(true);
    for (const x of [t, y, z]) x.release();
    s1.destroy();
    s2.destroy();
  });

  it('report an error like a queued op: sticky, naming the op and its seq, later work skipped', async () => {
    const run = async (queued: boolean) => {
      const s = d.newStream();
      const t = Tensor.zeros(d, [8], 'fp32', { stream: s });
      if (queued) s.sleep(20);
      const inlined = s.stats().inlined;
      s.fail('boom');
      expect(s.stats().inlined - inlined).toBe(queued ? 0 : 1);
      fill(t, 3, { stream: s }); // skipped: the stream failed
      const err = await s.synchronize().then(
        () => null,
        (e: unknown) => e,
      );
      const stats = s.stats();
      s.destroy();
      return { err, stats, t };
    };
    const inline = await run(false);
    const queued = await run(true);
    for (const r of [inline, queued]) {
      expect(r.err).toBeInstanceOf(StreamError);
      const e = r.err as StreamError;
      expect(e.message).toMatch(/failed in op #\d+ 'fail': boom Later work on this stream was skipped\. HINT: fix the failing op and use a new stream\./);
      expect(e.details).toMatchObject({ op: 'fail', causeMessage: 'boom' });
      expect(r.stats.error?.message).toBe(e.message);
    }
    // The same seq in both (the sleep takes one more), and the same text apart from stream id and seq.
    const norm = (e: unknown) => (e as Error).message.replace(/Stream \d+/, 'Stream S').replace(/#\d+/, '#N');
    expect(norm(inline.err)).toBe(norm(queued.err));
    expect((queued.err as StreamError).details.seq).toBe((inline.err as StreamError).details.seq + 1);
    // The fill after the failure ran in neither.
    const s = d.newStream();
    for (const r of [inline, queued]) {
      expect(Array.from(await r.t.toArray({ stream: s }))).toEqual(new Array(8).fill(0));
      r.t.release();
    }
    s.destroy();
  });

  it('stay on the stream thread above 1 MiB, and never for sleeps', async () => {
    const s = d.newStream();
    const big = Tensor.empty(d, [512 * 1024], 'fp32'); // 2 MiB
    const small = Tensor.empty(d, [256 * 1024], 'fp32'); // 1 MiB: the bound itself
    const i0 = s.stats().inlined;
    fill(big, 1, { stream: s });
    expect(s.stats().inlined).toBe(i0);
    await s.synchronize();
    const i1 = s.stats().inlined;
    fill(small, 1, { stream: s });
    expect(s.stats().inlined).toBe(i1 + 1);
    s.sleep(1);
    expect(s.stats().inlined).toBe(i1 + 1);
    await s.synchronize();
    big.release();
    small.release();
    s.destroy();
  });
  it('settle their completion within the enqueue call: no trip through the event loop', async () => {
    const s = d.newStream();
    const t = Tensor.fromArray(d, new Float32Array([1, 2, 3]), [3], { stream: s });
    let synced = false;
    void s.synchronize().then(() => (synced = true));
    let read: Float32Array | undefined;
    void t.toArray({ stream: s }).then((x) => (read = x as Float32Array));
    await microtasks();
    expect(synced).toBe(true);
    expect(Array.from(read!)).toEqual([1, 2, 3]);
    // An inline op that fails rejects its own completion the same way, with the stream's error.
    const { promise } = enqueueWithCompletion((tok) => s.native.fail('inline boom', tok));
    let failed: unknown;
    void promise.catch((e: unknown) => (failed = e));
    await microtasks();
    expect(failed).toBeInstanceOf(StreamError);
    expect((failed as StreamError).message).toMatch(/failed in op #\d+ 'fail': inline boom/);
    // Queued behind a sleep, the completion comes through the event loop: not within microtasks.
    const q = d.newStream();
    q.sleep(30);
    let queuedDone = false;
    const p = q.synchronize().then(() => (queuedDone = true));
    await microtasks();
    expect(queuedDone).toBe(false);
    await p;
    expect(queuedDone).toBe(true);
    t.release();
    s.destroy();
    q.destroy();
  });
});
