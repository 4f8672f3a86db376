/**
 * Per-rank side of the collectives benchmark: owns the buffers, runs one size of
 * one op, checks the result against values that are exact in every dtype, and
 * returns its per-iteration times. Also runs the STREAM-like copy baseline.
 */
import { resourceUsage } from 'node:process';
import { copy, fill, Tensor, type DType, type RankContext, type ReduceOp, type Stream } from '../src/internal.js';

export type BenchOp = 'allReduce' | 'allGather' | 'reduceScatter' | 'broadcast' | 'allToAll';

export interface CaseResult {
  /** Completion time (ms since the epoch, native clock) of each timed op on this rank, in order. */
  endsMs: number[];
  /** When this rank's stream thread picked up each timed op (native clock). */
  startsMs: number[];
  /**
   * CPU microseconds of the whole process (every rank's JS and stream threads) while this
   * rank's timed ops ran: on a shared machine the wall-clock time moves with the load, the
   * CPU an op costs much less.
   */
  cpuUs: number;
  /**
   * Host wall-clock microseconds on this rank from enqueuing the first timed op to the
   * host seeing the last one complete (its awaits or its synchronize): what the caller
   * waits, wake-ups included.
   */
  wallUs: number;
  wrong: number;
}

/** Elements of send and recv for `bytes` (nccl-tests size: allGather = total recv, reduceScatter = total send). */
export function counts(op: BenchOp, bytes: number, elem: number, p: number): { send: number; recv: number } {
  const n = Math.floor(bytes / elem);
  switch (op) {
    case 'allReduce':
    case 'broadcast':
      return { send: n, recv: n };
    case 'allGather':
      return { send: Math.floor(n / p), recv: Math.floor(n / p) * p };
    case 'reduceScatter':
      return { send: Math.floor(n / p) * p, recv: Math.floor(n / p) };
    case 'allToAll':
      return { send: Math.floor(n / p) * p, recv: Math.floor(n / p) * p };
  }
}

/**
 * `each`: the timed ops are enqueued back to back and every op's promise is kept and awaited
 * together (Promise.all), as a caller pipelining its collectives writes it; the stream may post
 * their completions in runs (native/device/stream.h, "Batched completions"). `awaited`: each op
 * is awaited before the next is enqueued (`await comm.allReduce(...)` in a loop: one host
 * round trip per op, nothing to batch). `none` (allReduce only): enqueued with no completion
 * and one stream.synchronize() at the end, as NCCL ops are.
 */
export type Completions = 'each' | 'awaited' | 'none';

export class CollectivesBench {
  constructor(private readonly ctx: RankContext) {}

  /**
   * Runs one size of one op. In place as nccl-tests does it: allReduce, broadcast and
   * allToAll with send === recv; allGather sends this rank's chunk of recv; reduceScatter
   * receives into this rank's chunk of send.
   */
  async runCase(
    op: BenchOp,
    dtype: DType,
    bytes: number,
    iters: number,
    warmup: number,
    redop: ReduceOp,
    inPlace = false,
    completions: Completions = 'each',
  ): Promise<CaseResult> {
    const { comm, device, rank } = this.ctx;
    const p = comm.size;
    const elem = dtype === 'int64' ? 8 : dtype === 'fp32' || dtype === 'int32' ? 4 : 2;
    const c = counts(op, bytes, elem, p);
    const stream = device.defaultStream;
    // Inputs are small integers so every result is exact in every dtype: rank+1 (sum 136 on
    // 16 ranks), and for prod 2 on ranks 0-1 and 1 elsewhere (product 4).
    const value = redop === 'prod' ? (rank < 2 ? 2 : 1) : rank + 1;
    const { send, recv, owned } = buffers(device, op, dtype, c, rank, elem, inPlace);
    try {
      const refill = () => {
        if (!inPlace || op === 'allGather') fill(recv, 0, { stream });
        fill(send, value, { stream });
      };
      const run = (): Promise<void> => {
        switch (op) {
          case 'allReduce':
            return comm.allReduce(send, recv, redop, stream);
          case 'allGather':
            return comm.allGather(send, recv, stream);
          case 'reduceScatter':
            return comm.reduceScatter(send, recv, redop, stream);
          case 'broadcast':
            return comm.broadcast(send, recv, 0, stream);
          case 'allToAll':
            return comm.allToAll(send, recv, stream);
        }
      };
      refill();
      for (let i = 0; i < warmup; i++) await run();
      // nccl-tests style: enqueue every timed op back to back, then wait once. Op times come
      // from the native flight recorder (when each op ended on this rank's stream thread), so
      // the JS round trip per op is not part of the measurement.
      // The barrier lines the ranks up after their (slow) flight-record reads, so the CPU
      // window below holds the timed ops and nothing else.
      const firstId = (comm.flightRecord().ranks[rank]?.lastEnqueued?.id ?? 0) + 2;
      await comm.barrier(stream);
      const before = resourceUsage();
      const t0 = performance.now();
      if (completions === 'none') {
        // The same (already validated) allReduce enqueued with token 0: nobody awaits it, so
        // the stream thread posts no completion and the host thread is not woken per op.
        const codes: Record<DType, number> = { fp32: 0, bf16: 1, fp16: 2, int32: 3, int64: 4, uint8: 5 };
        const red: Record<ReduceOp, number> = { sum: 0, prod: 1, max: 2, min: 3, avg: 4 };
        for (let i = 0; i < iters; i++) {
          comm.native.allReduce(send.buffer, send.byteOffset, recv.buffer, recv.byteOffset, send.numel, codes[dtype], red[redop], stream.native, 0);
        }
        await stream.synchronize();
      } else if (completions === 'awaited') {
        for (let i = 0; i < iters; i++) await run();
      } else {
        await Promise.all(Array.from({ length: iters }, run));
      }
      const wallUs = (performance.now() - t0) * 1000;
      const after = resourceUsage();
      const cpuUs = after.userCPUTime + after.systemCPUTime - before.userCPUTime - before.systemCPUTime;
      const mine = comm.flightRecord().ranks[rank]!.entries.filter((e) => e.id >= firstId && e.id < firstId + iters);
      const endsMs = mine.map((e) => e.endedAtMs!);
      const startsMs = mine.map((e) => e.startedAtMs!);
      // Correctness on a fresh run (#wrong, nccl-tests style).
      refill();
      await run();
      const got = await recv.toArray({ stream });
      const wrong = countWrong(op, redop, dtype, got, p, c);
      return { endsMs, startsMs, cpuUs, wallUs, wrong };
    } finally {
      for (const t of owned) t.release();
    }
  }

  private copyBufs: { stream: Stream; a: Tensor; b: Tensor } | undefined;

  /** Allocates and touches the buffers of the STREAM-like copy (kept until copyDone). */
  async copyPrepare(bytes: number): Promise<void> {
    const { device } = this.ctx;
    const stream = device.newStream();
    const a = Tensor.empty(device, [bytes], 'uint8');
    const b = Tensor.empty(device, [bytes], 'uint8');
    fill(a, 1, { stream });
    fill(b, 2, { stream });
    await stream.synchronize();
    this.copyBufs = { stream, a, b };
  }

  /**
   * One device-to-device copy of the prepared buffers on this rank's own stream;
   * returns its seconds. The driver starts it on every copying rank at once, so the
   * copies run concurrently as STREAM's threads do.
   */
  async copyOnce(): Promise<number> {
    const { stream, a, b } = this.copyBufs!;
    const t0 = process.hrtime.bigint();
    copy(b, a, { stream });
    await stream.synchronize();
    return Number(process.hrtime.bigint() - t0) / 1e9;
  }

  copyDone(): void {
    if (!this.copyBufs) return;
    this.copyBufs.a.release();
    this.copyBufs.b.release();
    this.copyBufs.stream.destroy();
    this.copyBufs = undefined;
  }
}

/** Send and recv tensors of one case; in place they share one buffer (views at nccl-tests' offsets). */
function buffers(
  device: RankContext['device'],
  op: BenchOp,
  dtype: DType,
  c: { send: number; recv: number },
  rank: number,
  elem: number,
  inPlace: boolean,
): { send: Tensor; recv: Tensor; owned: Tensor[] } {
  if (!inPlace) {
    const send = Tensor.empty(device, [c.send], dtype);
    const recv = Tensor.empty(device, [c.recv], dtype);
    return { send, recv, owned: [send, recv] };
  }
  const whole = Tensor.empty(device, [Math.max(c.send, c.recv)], dtype);
  // A view shares the buffer: releasing `whole` releases the views too.
  const view = (numel: number, offsetElems: number) => new Tensor(device, whole.buffer, dtype, [numel], undefined, whole.byteOffset + offsetElems * elem);
  switch (op) {
    case 'allGather':
      return { send: view(c.send, rank * c.send), recv: whole, owned: [whole] };
    case 'reduceScatter':
      return { send: whole, recv: view(c.recv, rank * c.recv), owned: [whole] };
    default:
      return { send: whole, recv: whole, owned: [whole] };
  }
}

function countWrong(op: BenchOp, redop: ReduceOp, dtype: DType, got: ArrayLike<number | bigint>, p: number, c: { send: number; recv: number }): number {
  const values = Array.from({ length: p }, (_, r) => (redop === 'prod' ? (r < 2 ? 2 : 1) : r + 1));
  const reduced = (() => {
    switch (redop) {
      case 'sum':
        return values.reduce((a, b) => a + b, 0);
      case 'prod':
        return values.reduce((a, b) => a * b, 1);
      case 'max':
        return Math.max(...values);
      case 'min':
        return Math.min(...values);
      case 'avg': {
        const mean = values.reduce((a, b) => a + b, 0) / p;
        return dtype === 'int32' || dtype === 'int64' ? Math.trunc(mean) : mean;
      }
    }
  })();
  const chunk = c.recv / p;
  let wrong = 0;
  for (let i = 0; i < got.length; i++) {
    let want: number;
    switch (op) {
      case 'allReduce':
      case 'reduceScatter':
        want = reduced;
        break;
      case 'broadcast':
        want = values[0]!;
        break;
      case 'allGather':
      case 'allToAll':
        want = values[Math.floor(i / chunk)]!;
        break;
    }
    if (Number(got[i]) !== want) wrong++;
  }
  return wrong;
}
