/**
 * The world communicator of a run that spans processes (`mpirun -np P ascent
 * launch --nproc-per-node N`): P x N ranks, global rank = process x N + local
 * rank. Collectives are hierarchical: the ranks of a process combine through the
 * process's own communicator (the zero-copy shared-memory path), its local rank 0
 * (the process leader) runs the leg between processes on the net thread (MPI),
 * then the leader broadcasts the result inside the process.
 *
 * Fingerprints are checked on both legs (inside the process by the local
 * communicator, between processes by the net leg); every wait has a deadline
 * (the local one and HCCL_EXEC_TIMEOUT on the net leg); a failure of the net leg
 * aborts the local communicator, so every rank of the process fails at once.
 *
 * On the leader the net leg runs between stream ops: await a collective's promise
 * before other work on the leader's stream reads its recv (other ranks' streams
 * are ordered by the local broadcast, which waits for the leader).
 */
import { Communicator, type ReduceOp, type SplitOptions } from './comm.js';
import { loadNet, netError, type NativeNet } from './net.js';
import { DTYPE_CODE, describe, dtypeSize } from '../device/dtype.js';
import type { Stream } from '../device/stream.js';
import { Tensor } from '../device/tensor.js';
import { InvalidArgumentError, InvalidStateError } from '../errors.js';

/** Where this process sits in the job. */
export interface ProcessLayout {
  /** This process's index (MPI rank; torchrun's node rank). */
  nodeRank: number;
  /** Number of processes. */
  nnodes: number;
}

const NET_DTYPES = ['fp32', 'int32', 'int64'] as const;
const REDUCE_CODE: Readonly<Record<ReduceOp, number>> = { sum: 0, prod: 1, max: 2, min: 3, avg: 0 };

export class SpanningCommunicator extends Communicator {
  readonly local: Communicator;
  readonly layout: Readonly<ProcessLayout>;
  readonly #net: NativeNet | undefined;
  /** The leader runs one hierarchical collective at a time, so its local ops keep the order its peers enqueue them in. */
  #tail: Promise<unknown> = Promise.resolve();
  #inFlight = 0;

  constructor(local: Communicator, layout: ProcessLayout) {
    super(local.native, local.device, local.settings);
    this.local = local;
    this.layout = Object.freeze({ ...layout });
    this.#net = local.rank === 0 ? loadNet() : undefined;
  }

  override get rank(): number {
    return this.layout.nodeRank * this.local.size + this.local.rank;
  }

  override get size(): number {
    return this.layout.nnodes * this.local.size;
  }

  /** True on each process's local rank 0, which runs the leg between processes. */
  get isProcessLeader(): boolean {
    return this.local.rank === 0;
  }

  // ------------------------------------------------------------------ helpers

  #netTensor(t: unknown, name: string, fn: string): Tensor {
    if (!(t instanceof Tensor)) throw new InvalidArgumentError(`Expected a Tensor for ${name} of ${fn} but received ${describe(t)}.`, { fn, argument: name });
    if (!(NET_DTYPES as readonly string[]).includes(t.dtype)) {
      throw new InvalidArgumentError(
        `${fn} across processes supports ${NET_DTYPES.join(', ')} but ${name} is ${t.dtype}. HINT: cast to fp32 for the collective (bf16 / fp16 are not reduced between processes yet).`,
        { fn, argument: name, dtype: t.dtype },
      );
    }
    return t;
  }

  /**
   * Leader only: `first` enqueues the collective's local op(s) before the net leg,
   * `rest` runs the net leg and what follows. Collectives run one after another, so
   * the leader's local ops keep the order its peers enqueued them in; when none is in
   * flight `first` runs now (bad arguments then throw synchronously, as everywhere).
   * A failure aborts the local communicator: the process's other ranks wake at once.
   */
  #leaderRun<T>(fn: string, first: () => T, rest: (started: T) => Promise<void>): Promise<void> {
    const started = this.#inFlight === 0 ? { value: first() } : undefined;
    this.#inFlight++;
    const run = this.#tail
      .then(() => rest(started ? started.value : first()))
      .catch((err: Error) => {
        if (!this.local.aborted) {
          // Blame whom the error names (not this leader, as abort() would); the communicator counts this process's ranks from 0.
          const named = (err as { details?: { culpritWorldRanks?: unknown } }).details?.culpritWorldRanks;
          const first = this.layout.nodeRank * this.local.size;
          const local = Array.isArray(named) ? (named as number[]).map((r) => r - first).filter((r) => r >= 0 && r < this.local.size) : [];
          Communicator.abortById(
            this.local.id,
            `rank ${this.rank} (leader of process ${this.layout.nodeRank}): ${fn} between processes failed: ${err.message}`,
            local,
          );
        }
        throw err;
      })
      .finally(() => this.#inFlight--);
    this.#tail = run.catch(() => undefined);
    return run;
  }

  /**
   * The net leg's deadline: 90% of the exec timeout, so that a missing process is
   * reported by the leader's net leg, not by the local wait of its peers behind it.
   */
  #timeout(): number {
    return Math.max(1, Math.floor(this.settings.execTimeoutMs * 0.9));
  }

  async #onNet<T>(fn: string, call: (net: NativeNet) => Promise<T>): Promise<T> {
    try {
      return await call(this.#net!);
    } catch (err) {
      throw netError(err, `${fn} between processes (rank ${this.rank}, process ${this.layout.nodeRank} of ${this.layout.nnodes})`, this.local.size);
    }
  }

  #upload(t: Tensor, host: Uint8Array, stream: Stream | undefined): void {
    const st = stream ?? t.device.defaultStream;
    st.native.copyH2D(t.buffer, t.byteOffset, host, 0);
  }

  // ------------------------------------------------------------------ collectives

  override allReduce(send: Tensor, recv: Tensor, op: ReduceOp = 'sum', stream?: Stream): Promise<void> {
    const fn = 'allReduce()';
    this.#netTensor(send, 'send', fn);
    const r = this.#netTensor(recv, 'recv', fn);
    // The local op validates everything (op, shapes, stream) and combines this process's ranks.
    const combine = () => this.local.allReduce(send, recv, op === 'avg' ? 'sum' : op, stream);
    if (!this.#net) return Promise.all([combine(), this.local.broadcast(recv, recv, 0, stream)]).then(() => undefined);
    return this.#leaderRun(fn, combine, async (localDone) => {
      await localDone;
      const host = await r.toBytes(stream ? { stream } : undefined);
      await this.#onNet(fn, (net) => net.allReduce(host, r.numel, DTYPE_CODE[r.dtype], REDUCE_CODE[op], this.#timeout()));
      if (op === 'avg') divideInPlace(host, r.dtype, this.size);
      this.#upload(r, host, stream);
      await this.local.broadcast(recv, recv, 0, stream);
    });
  }

  override broadcast(send: Tensor, recv: Tensor, root: number, stream?: Stream): Promise<void> {
    const fn = 'broadcast()';
    if (typeof root !== 'number' || !Number.isInteger(root) || root < 0 || root >= this.size) {
      throw new InvalidArgumentError(`Expected an integer in [0, ${this.size - 1}] for root but received ${describe(root)}.`, { argument: 'root' });
    }
    this.#netTensor(send, 'send', fn);
    const r = this.#netTensor(recv, 'recv', fn);
    const rootProcess = Math.floor(root / this.local.size);
    const rootLocal = root % this.local.size;
    const inRootProcess = rootProcess === this.layout.nodeRank;
    // The root's process first spreads it locally (so its leader holds it); the others wait for the leader.
    const spread = () => (inRootProcess ? this.local.broadcast(send, recv, rootLocal, stream) : undefined);
    if (!this.#net) {
      return inRootProcess ? spread()! : this.local.broadcast(recv, recv, 0, stream);
    }
    return this.#leaderRun(fn, spread, async (first) => {
      if (first) await first;
      const host = inRootProcess ? await r.toBytes(stream ? { stream } : undefined) : new Uint8Array(r.nbytes);
      await this.#onNet(fn, (net) => net.broadcast(host, rootProcess, this.#timeout()));
      if (!inRootProcess) {
        this.#upload(r, host, stream);
        await this.local.broadcast(recv, recv, 0, stream);
      }
    });
  }

  override allGather(send: Tensor, recv: Tensor, stream?: Stream): Promise<void> {
    const fn = 'allGather()';
    const s = this.#netTensor(send, 'send', fn);
    const r = this.#netTensor(recv, 'recv', fn);
    if (r.dtype !== s.dtype) throw new InvalidArgumentError(`${fn}: send is ${s.dtype} but recv is ${r.dtype}; they must match.`, { fn });
    if (r.numel !== s.numel * this.size || !r.isContiguous) {
      throw new InvalidArgumentError(
        `${fn}: recv must be contiguous and hold size x send = ${this.size} x ${s.numel} = ${s.numel * this.size} elements but has ${r.numel}.`,
        { fn },
      );
    }
    if (s.buffer.id === r.buffer.id) {
      throw new InvalidArgumentError(`${fn} across processes does not run in place yet. HINT: pass a send tensor separate from recv.`, { fn });
    }
    // This process's block of recv: its ranks' chunks, gathered locally.
    const blockElems = s.numel * this.local.size;
    const block = new Tensor(r.device, r.buffer, r.dtype, [blockElems], undefined, r.byteOffset + this.layout.nodeRank * blockElems * dtypeSize(r.dtype));
    const gather = () => this.local.allGather(send, block, stream);
    if (!this.#net) return Promise.all([gather(), this.local.broadcast(recv, recv, 0, stream)]).then(() => undefined);
    return this.#leaderRun(fn, gather, async (localDone) => {
      await localDone;
      const mine = await block.toBytes(stream ? { stream } : undefined);
      const all = new Uint8Array(r.nbytes);
      await this.#onNet(fn, (net) => net.allGather(mine, all, this.#timeout()));
      this.#upload(r, all, stream);
      await this.local.broadcast(recv, recv, 0, stream);
    });
  }

  /**
   * recv = chunk `rank` of op over every rank's send: an allReduce of the whole send
   * (as above), then each rank copies its chunk out. Moves size x the data a true
   * reduce-scatter would between processes; correct first, a dedicated leg later.
   */
  override reduceScatter(send: Tensor, recv: Tensor, op: ReduceOp = 'sum', stream?: Stream): Promise<void> {
    const fn = 'reduceScatter()';
    const s = this.#netTensor(send, 'send', fn);
    const r = this.#netTensor(recv, 'recv', fn);
    if (r.dtype !== s.dtype) throw new InvalidArgumentError(`${fn}: send is ${s.dtype} but recv is ${r.dtype}; they must match.`, { fn });
    if (s.numel !== r.numel * this.size) {
      throw new InvalidArgumentError(`${fn}: send must hold size x recv = ${this.size} x ${r.numel} = ${r.numel * this.size} elements but has ${s.numel}.`, {
        fn,
      });
    }
    if (s.buffer.id === r.buffer.id) {
      throw new InvalidArgumentError(`${fn} across processes does not run in place yet. HINT: pass a recv tensor separate from send.`, { fn });
    }
    const full = Tensor.empty(s.device, [s.numel], s.dtype);
    const st = stream ?? s.device.defaultStream;
    // Pending ops keep `full` alive after its release.
    const take = () => {
      try {
        st.native.copyD2D(r.buffer, r.byteOffset, full.buffer, full.byteOffset + this.rank * r.nbytes, r.nbytes, 0);
      } finally {
        full.release();
      }
    };
    let reduced: Promise<void>;
    try {
      reduced = this.allReduce(send, full, op, stream);
    } catch (err) {
      full.release();
      throw err;
    }
    // Off the leader the allReduce's ops are already on the stream: the copy follows them in stream order.
    if (!this.#net) {
      take();
      return reduced;
    }
    return reduced.then(take, (err: Error) => {
      full.release();
      throw err;
    });
  }

  override barrier(stream?: Stream): Promise<void> {
    const arrive = () => this.local.barrier(stream);
    if (!this.#net) return Promise.all([arrive(), this.local.barrier(stream)]).then(() => undefined);
    return this.#leaderRun('barrier()', arrive, async (first) => {
      await first;
      await this.#onNet('barrier()', (net) => net.barrier(this.#timeout()));
      await this.local.barrier(stream);
    });
  }

  // ------------------------------------------------------------------ not across processes yet

  #notYet(fn: string): never {
    throw new InvalidStateError(
      `${fn} is not supported yet on a communicator that spans processes (this run has ${this.layout.nnodes} processes of ${this.local.size} ranks). HINT: use allReduce / broadcast / allGather / reduceScatter / barrier across processes, or run on one process (ascent launch without mpirun) for ${fn}.`,
      { fn },
    );
  }

  override allToAll(): Promise<void> {
    this.#notYet('allToAll()');
  }
  override allToAllV(): Promise<void> {
    this.#notYet('allToAllV()');
  }
  override send(): Promise<void> {
    this.#notYet('send()');
  }
  override recv(): Promise<void> {
    this.#notYet('recv()');
  }
  override groupStart(): void {
    this.#notYet('groupStart()');
  }
  override groupEnd(): Promise<void> {
    this.#notYet('groupEnd()');
  }
  override split(color?: number | null, key?: number, options?: SplitOptions): Promise<Communicator | null> {
    void color;
    void key;
    void options;
    this.#notYet('split()');
  }

  /** Aborts this process's ranks and tells every other process (their ranks fail at once, naming this one). */
  override abort(reason = 'abort() called'): void {
    this.local.abort(reason);
    void this.#net?.abortJob(`rank ${this.rank} aborted the world communicator: ${reason}`, 2000).catch(() => undefined);
  }

  override toString(): string {
    return `SpanningCommunicator(rank ${this.rank} of ${this.size}, process ${this.layout.nodeRank} of ${this.layout.nnodes}, local ${this.local.rank} of ${this.local.size})`;
  }
}

/** avg = sum / size, in place on the raw bytes (ints truncate, as the local path does). */
function divideInPlace(host: Uint8Array, dtype: string, n: number): void {
  const buf = host.buffer;
  if (dtype === 'fp32') {
    const a = new Float32Array(buf, host.byteOffset, host.byteLength / 4);
    for (let i = 0; i < a.length; i++) a[i]! /= n;
  } else if (dtype === 'int32') {
    const a = new Int32Array(buf, host.byteOffset, host.byteLength / 4);
    for (let i = 0; i < a.length; i++) a[i] = Math.trunc(a[i]! / n);
  } else {
    const a = new BigInt64Array(buf, host.byteOffset, host.byteLength / 8);
    for (let i = 0; i < a.length; i++) a[i] = a[i]! / BigInt(n);
  }
}
