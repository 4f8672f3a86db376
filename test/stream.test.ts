import { describe, expect, it } from 'vitest';
import { Device, Tensor, axpy, fill, scale } from '../src/runtime/device/device-index.js';
import { InvalidArgumentError, StreamError, TimeoutError } from '../src/runtime/errors.js';

const d = Device.get(0);

describe('streams and events', () => {
  it('runs ops in FIFO order', async () => {
    const s = d.newStream();
    const acc = Tensor.zeros(d, [16], 'fp32', { stream: s });
    const t = Tensor.empty(d, [16], 'fp32');
    for (let i = 1; i <= 20; i++) {
      fill(t, i, { stream: s });
      axpy(acc, i % 2 === 0 ? 1 : -1, t, { stream: s });
    }
    const seqs = s.pending().map((p) => p.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    const out = await acc.toArray({ stream: s });
    expect(Array.from(out)).toEqual(new Array(16).fill(10)); // sum of (-1)^i * i
    s.destroy();
  });

  it('orders streams with events', async () => {
    const s1 = d.newStream();
    const s2 = d.newStream();
    const t = Tensor.zeros(d, [256], 'fp32', { stream: s1 });
    s1.sleep(100);
    fill(t, 7, { stream: s1 });
    const ev = s1.recordEvent();
    s2.waitEvent(ev);
    const y = scale(t, 2, { stream: s2 });
    expect(ev.query()).toBe(false);
    expect(s2.pending().map((p) => p.op)).toEqual(['waitEvent', 'scale']);
    const out = await y.toArray({ stream: s2 });
    expect(out.every((v) => v === 14)).toBe(true);
    expect(ev.query()).toBe(true);
    s1.destroy();
    s2.destroy();
  });

  it('measures elapsed time between events', async () => {
    const s = d.newStream();
    const start = d.newEvent();
    const end = d.newEvent();
    expect(() => start.elapsedTime(end)).toThrow(InvalidArgumentError);
    start.record(s);
    s.sleep(30);
    end.record(s);
    await end.synchronize();
    const ms = start.elapsedTime(end);
    expect(ms).toBeGreaterThanOrEqual(29); // sleep waits at least its duration
    expect(Number.isFinite(ms)).toBe(true);
    s.destroy();
  });

  it('rejects synchronize after timeoutMs with a TimeoutError listing the pending ops', async () => {
    const s = d.newStream();
    const t = Tensor.empty(d, [8], 'fp32');
    s.sleep(60_000);
    fill(t, 1, { stream: s });
    const err = await s.synchronize({ timeoutMs: 50 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(TimeoutError);
    const e = err as TimeoutError;
    expect(e.code).toBe('ASCENT_TIMEOUT');
    expect(e.message).toMatch(/#1 sleep \(running for \d+ ms\)/);
    expect(e.message).toContain('#2 fill (queued)');
    expect(e.message).toContain('#3 synchronize (queued)');
    const pending = e.details.pending as { seq: number; op: string; state: string }[];
    expect(pending.map((p) => [p.seq, p.op, p.state])).toEqual([
      [1, 'sleep', 'running'],
      [2, 'fill', 'queued'],
      [3, 'synchronize', 'queued'],
    ]);
    expect(e.stack).toContain('stream.test.ts');
    s.destroy(); // wakes the sleep
    expect(s.pending()).toEqual([]);
    t.release();
  });

  it('keeps a sticky error: later ops are skipped and synchronize rejects with it', async () => {
    const s = d.newStream();
    const t = Tensor.zeros(d, [4], 'fp32', { stream: s });
    s.fail('injected failure');
    fill(t, 9, { stream: s });
    const err = await s.synchronize().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StreamError);
    const e = err as StreamError;
    expect(e.message).toContain("failed in op #2 'fail': injected failure");
    expect(e.details).toMatchObject({ op: 'fail', seq: 2, device: 0, causeMessage: 'injected failure' });
    await expect(s.synchronize()).rejects.toBeInstanceOf(StreamError);
    await expect(t.toArray({ stream: s })).rejects.toThrow(/injected failure/);
    // fill was skipped: the value is still 0 when read on a healthy stream.
    expect(Array.from(await t.toArray())).toEqual([0, 0, 0, 0]);
    expect(s.stats().error).toBeInstanceOf(StreamError);
    s.destroy();
  });

  it('a stream waiting on an event its failed stream never records fails with that error instead of waiting forever', async () => {
    const s1 = d.newStream();
    const s2 = d.newStream();
    const t = Tensor.zeros(d, [4], 'fp32', { stream: s2 });
    s1.sleep(50);
    s1.fail('injected failure');
    const ev = s1.recordEvent(); // skipped: s1 failed before it
    s2.waitEvent(ev);
    fill(t, 9, { stream: s2 }); // must not run: it was ordered after a record that never ran
    const err = (await s2.synchronize({ timeoutMs: 20_000 }).then(
      () => undefined,
      (e: unknown) => e,
    )) as StreamError;
    expect(err).toBeInstanceOf(StreamError);
    expect(err.message).toContain("'waitEvent'");
    expect(err.message).toContain('was recorded on a stream that failed before it got to the record');
    expect(err.message).toContain('injected failure');
    expect(ev.query()).toBe(true);
    await expect(ev.synchronize()).rejects.toThrow(/injected failure/);
    expect(Array.from(await t.toArray())).toEqual([0, 0, 0, 0]);
    // A later record that runs (on a healthy stream) supersedes the failed one.
    const s3 = d.newStream();
    ev.record(s3);
    s3.waitEvent(ev);
    fill(t, 5, { stream: s3 });
    expect(Array.from(await t.toArray({ stream: s3 }))).toEqual([5, 5, 5, 5]);
    // So does destroying the recording stream with the record still queued.
    const s4 = d.newStream();
    const s5 = d.newStream();
    s4.sleep(60_000);
    const ev2 = s4.recordEvent();
    s5.waitEvent(ev2);
    const waited = s5.synchronize({ timeoutMs: 20_000 }).then(
      () => 'resolved',
      (e: unknown) => e,
    );
    s4.destroy();
    const e2 = (await waited) as StreamError;
    expect(e2).toBeInstanceOf(StreamError);
    expect(e2.message).toContain('was recorded on a stream that failed before it got to the record');
    for (const s of [s1, s2, s3, s5]) s.destroy();
  });

  it('does not block the event loop while an op runs, and destroy wakes it', async () => {
    const s = d.newStream();
    s.sleep(60_000);
    const sync = s.synchronize().then(
      () => 'resolved',
      (e: unknown) => e,
    );
    let ticks = 0;
    await new Promise<void>((resolve) => {
      const timer = setInterval(() => {
        if (++ticks === 5) {
          clearInterval(timer);
          resolve();
        }
      }, 5);
    });
    expect(ticks).toBe(5);
    expect(s.pending()[0]).toMatchObject({ op: 'sleep', state: 'running' });
    s.destroy();
    const result = await sync;
    expect(result).toBeInstanceOf(StreamError);
    expect((result as StreamError).message).toMatch(/destroyed before op #2 'synchronize'/);
    expect(() => s.sleep(1)).toThrow(InvalidArgumentError);
  });

  it('replaces a destroyed default stream, and resolving it per op reads no native stats', () => {
    const first = d.defaultStream;
    expect(first.destroyed).toBe(false);
    // Every op that names no stream resolves the default stream; a native stats() object per
    // resolution cost more than the rest of a small op's JS path together.
    const native = first.native;
    const stats = native.stats.bind(native);
    let calls = 0;
    // An own property shadows the (read-only) prototype method.
    Object.defineProperty(native, 'stats', {
      configurable: true,
      value: () => {
        calls++;
        return stats();
      },
    });
    try {
      const a = Tensor.zeros(d, [4], 'fp32');
      fill(a, 2);
      scale(a, 3).release();
      a.release();
      expect(calls).toBe(0);
    } finally {
      delete (native as { stats?: unknown }).stats;
    }
    first.destroy();
    expect(first.destroyed).toBe(true);
    expect(first.stats().destroyed).toBe(true);
    const second = d.defaultStream;
    expect(second).not.toBe(first);
    expect(second.destroyed).toBe(false);
    expect(d.defaultStream).toBe(second);
  });

  it('validates options', () => {
    const s = d.newStream();
    expect(() => s.synchronize({ timeout: 5 } as never)).toThrow(/Unknown option 'timeout'/);
    expect(() => s.synchronize({ timeoutMs: -1 })).toThrow(InvalidArgumentError);
    s.destroy();
  });
});
