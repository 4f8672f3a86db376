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
 * are ordered by the local broadcast, which waits for the leader). allToAllV and
 * split read what every rank gathered on the host first: await them on every rank.
 *
 * Between processes: allToAll gathers this process's sends on its leader, which
 * exchanges one block per process (MPI_Ialltoall) and spreads the result;
 * allToAllV first gathers every rank's counts (checked on every rank), then runs
 * a padded allToAll; reduceScatter combines locally, then MPI_Ireduce_scatter_block
 * hands each process only its block; send / recv between ranks of different
 * processes go straight from the rank's thread to the net thread (tagged by local
 * source and destination, so each pair keeps its order), bounded by the exec
 * timeout; split() makes a communicator among the processes of each color that
 * spans processes (spanning-plan.ts says which shapes it accepts).
 *
 * A split may be ragged: its processes hold unequal numbers of its ranks (a weight
 * sync's fan-out: one trainer rank of one process with every engine rank of another).
 * Ranks still number process by process; allReduce, broadcast, allGather (padded to the
 * largest block between processes), barrier and send / recv serve it; reduceScatter,
 * allToAll(V) and split refuse it with a HINT.
 *
 * Leaders keep one order per thread: a rank may lead several spanning communicators
 * (a process's engine rank leads every fan-out of a sync), and their local legs share
 * its streams, where the process's other ranks enqueued them in call order. So the
 * leader runs every net leg of its thread in call order (as blocking collectives
 * would), whichever communicator it belongs to.
 */
import { COMM_DTYPES, Communicator, type ReduceOp, type SplitOptions } from './comm.js';
import { loadNet, NET_KIND_ALLTOALLV_COUNTS, netError, type NativeNet } from './net.js';
import { CrossProcessP2P } from './spanning-p2p.js';
import { checkAllToAllVCounts, packAllToAll, planSplit, unpackAllToAll } from './spanning-plan.js';
import { checkOptions } from '../device/device.js';
import { DTYPE_CODE, describe, dtypeSize } from '../device/dtype.js';
import type { Stream } from '../device/stream.js';
import { Tensor } from '../device/tensor.js';
import { InternalError, InvalidArgumentError, InvalidStateError } from '../errors.js';

/** Where this process sits in the job. */
export interface ProcessLayout {
  /** This process's index (MPI rank; torchrun's node rank). */
  nodeRank: number;
  /** Number of processes. */
  nnodes: number;
}

const NET_DTYPES = ['fp32', 'int32', 'int64'] as const;

/** The leader's legs of every spanning communicator of this thread, in call order (see the header). */
const leaderChain = { tail: Promise.resolve() as Promise<unknown>, inFlight: 0 };
const REDUCE_CODE: Readonly<Record<ReduceOp, number>> = { sum: 0, prod: 1, max: 2, min: 3, avg: 0 };

export class SpanningCommunicator extends Communicator {
  readonly local: Communicator;
  readonly layout: Readonly<ProcessLayout>;
  readonly #net: NativeNet | undefined;
  /** The communicator among processes the net leg runs on (0 = the world; a split's otherwise). */
  readonly #commId: number;
  /** This communicator's ranks in each of its processes (all equal but in a ragged split), and where each process's start. */
  readonly #counts: readonly number[];
  readonly #offsets: readonly number[];
  readonly #ragged: boolean;
  /** Splits so far: every rank counts the same, so it names the new net communicators alike. */
  #splits = 0;
  readonly #p2pAcross = new CrossProcessP2P();

  /** Ranks per process in the whole run: culprit processes become world ranks with it. */
  readonly #worldRanksPerProcess: number;

  /**
   * `net` names a split's communicator among processes, the run's ranks per process (default:
   * the world's) and, for a ragged split, this communicator's ranks in each process.
   */
  constructor(local: Communicator, layout: ProcessLayout, net: { commId?: number; worldRanksPerProcess?: number; counts?: readonly number[] } = {}) {
    super(local.native, local.device, local.settings);
    this.local = local;
    this.layout = Object.freeze({ ...layout });
    this.#commId = net.commId ?? 0;
    this.#worldRanksPerProcess = net.worldRanksPerProcess ?? local.size;
    const counts = net.counts ?? Array.from({ length: layout.nnodes }, () => local.size);
    if (counts.length !== layout.nnodes || counts[layout.nodeRank] !== local.size) {
      throw new InternalError(
        `SpanningCommunicator: ranks per process [${counts.join(', ')}] do not fit ${layout.nnodes} processes with ${local.size} ranks in process ${layout.nodeRank}.`,
      );
    }
    this.#counts = Object.freeze([...counts]);
    this.#offsets = Object.freeze(counts.map((_, p) => counts.slice(0, p).reduce((a, b) => a + b, 0)));
    this.#ragged = counts.some((c) => c !== counts[0]);
    this.#net = local.rank === 0 ? loadNet() : undefined;
  }

  override get rank(): number {
    return this.#offsets[this.layout.nodeRank]! + this.local.rank;
  }

  override get size(): number {
    return this.#offsets[this.layout.nnodes - 1]! + this.#counts[this.layout.nnodes - 1]!;
  }

  override get spansProcesses(): boolean {
    return this.layout.nnodes > 1;
  }

  /** True when its processes hold unequal numbers of its ranks (a ragged split). */
  get ragged(): boolean {
    return this.#ragged;
  }

  /** The process of rank `r` of this communicator and its index there. */
  #locate(r: number): { process: number; local: number } {
    let p = this.layout.nnodes - 1;
    while (p > 0 && this.#offsets[p]! > r) p--;
    return { process: p, local: r - this.#offsets[p]! };
  }

  /** Ops that need the same number of ranks in every process refuse a ragged communicator. */
  #needEven(fn: string): void {
    if (!this.#ragged) return;
    throw new InvalidStateError(
      `${fn} is not supported on a ragged communicator across processes (ranks per process [${this.#counts.join(', ')}]). HINT: run it on a communicator with the same number of ranks in each process (e.g. the world, or a split with color = local rank); a ragged split serves allReduce, broadcast, allGather, barrier and send / recv.`,
      { fn, counts: [...this.#counts] },
    );
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

  /** A tensor an op only moves (any dtype collectives take: no arithmetic between processes). */
  #moveTensor(t: unknown, name: string, fn: string): Tensor {
    if (!(t instanceof Tensor)) throw new InvalidArgumentError(`Expected a Tensor for ${name} of ${fn} but received ${describe(t)}.`, { fn, argument: name });
    t.checkLive(name);
    if (!COMM_DTYPES.includes(t.dtype)) {
      throw new InvalidArgumentError(`${fn} supports ${COMM_DTYPES.join(', ')} but ${name} is ${t.dtype}.`, { fn, argument: name, dtype: t.dtype });
    }
    if (!t.isContiguous) throw new InvalidArgumentError(`${name} of ${fn} must be contiguous.`, { fn, argument: name });
    return t;
  }

  #notInPlace(s: Tensor, r: Tensor, fn: string): void {
    if (s.buffer.id === r.buffer.id) {
      throw new InvalidArgumentError(`${fn} across processes does not run in place yet. HINT: pass a recv tensor separate from send.`, { fn });
    }
  }

  /**
   * Leader only: `first` enqueues the collective's local op(s) before the net leg,
   * `rest` runs the net leg and what follows. Collectives run one after another (over
   * every spanning communicator of this thread), so the leader's local ops keep the
   * order its peers enqueued them in; when none is in flight `first` runs now (bad arguments then throw synchronously, as everywhere).
   * A failure aborts the local communicator: the process's other ranks wake at once.
   */
  #leaderRun<T>(fn: string, first: () => T, rest: (started: T) => Promise<void>): Promise<void> {
    const started = leaderChain.inFlight === 0 ? { value: first() } : undefined;
    leaderChain.inFlight++;
    const run = leaderChain.tail
      .then(() => rest(started ? started.value : first()))
      .catch((err: Error) => {
        if (!this.local.aborted) {
          // Blame whom the error names (not this leader, as abort() would); the communicator counts this process's ranks from 0.
          // A split's local communicator numbers them otherwise: there the message names them.
          const named = (err as { details?: { culpritWorldRanks?: unknown } }).details?.culpritWorldRanks;
          const first = this.layout.nodeRank * this.local.size;
          const local =
            this.#commId === 0 && Array.isArray(named) ? (named as number[]).map((r) => r - first).filter((r) => r >= 0 && r < this.local.size) : [];
          Communicator.abortById(
            this.local.id,
            `rank ${this.rank} (leader of process ${this.layout.nodeRank}): ${fn} between processes failed: ${err.message}`,
            local,
          );
        }
        throw err;
      })
      .finally(() => leaderChain.inFlight--);
    leaderChain.tail = run.catch(() => undefined);
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
      throw netError(err, `${fn} between processes (rank ${this.rank}, process ${this.layout.nodeRank} of ${this.layout.nnodes})`, this.#worldRanksPerProcess);
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
      await this.#onNet(fn, (net) => net.allReduce(host, r.numel, DTYPE_CODE[r.dtype], REDUCE_CODE[op], this.#timeout(), this.#commId));
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
    const { process: rootProcess, local: rootLocal } = this.#locate(root);
    const inRootProcess = rootProcess === this.layout.nodeRank;
    // The root's process first spreads it locally (so its leader holds it); the others wait for the leader.
    const spread = () => (inRootProcess ? this.local.broadcast(send, recv, rootLocal, stream) : undefined);
    if (!this.#net) {
      return inRootProcess ? spread()! : this.local.broadcast(recv, recv, 0, stream);
    }
    return this.#leaderRun(fn, spread, async (first) => {
      if (first) await first;
      const host = inRootProcess ? await r.toBytes(stream ? { stream } : undefined) : new Uint8Array(r.nbytes);
      await this.#onNet(fn, (net) => net.broadcast(host, rootProcess, this.#timeout(), this.#commId));
      if (!inRootProcess) {
        this.#upload(r, host, stream);
        await this.local.broadcast(recv, recv, 0, stream);
      }
    });
  }

  override allGather(send: Tensor, recv: Tensor, stream?: Stream): Promise<void> {
    return this.#allGather(send, recv, stream, 0);
  }

  /** `kind` names the net leg's fingerprint (allToAllV's count exchange says so in a mismatch). */
  #allGather(send: Tensor, recv: Tensor, stream: Stream | undefined, kind: number): Promise<void> {
    const fn = kind === NET_KIND_ALLTOALLV_COUNTS ? 'allToAllV() (count exchange)' : 'allGather()';
    const s = this.#netTensor(send, 'send', fn);
    const r = this.#netTensor(recv, 'recv', fn);
    if (r.dtype !== s.dtype) throw new InvalidArgumentError(`${fn}: send is ${s.dtype} but recv is ${r.dtype}; they must match.`, { fn });
    if (r.numel !== s.numel * this.size || !r.isContiguous) {
      throw new InvalidArgumentError(
        `${fn}: recv must be contiguous and hold size x send = ${this.size} x ${s.numel} = ${s.numel * this.size} elements but has ${r.numel}.`,
        { fn },
      );
    }
    this.#notInPlace(s, r, fn);
    // This process's block of recv: its ranks' chunks, gathered locally.
    const blockElems = s.numel * this.local.size;
    const es = dtypeSize(r.dtype);
    const block = new Tensor(r.device, r.buffer, r.dtype, [blockElems], undefined, r.byteOffset + this.#offsets[this.layout.nodeRank]! * s.numel * es);
    const gather = () => this.local.allGather(send, block, stream);
    if (!this.#net) return Promise.all([gather(), this.local.broadcast(recv, recv, 0, stream)]).then(() => undefined);
    return this.#leaderRun(fn, gather, async (localDone) => {
      await localDone;
      const mine = await block.toBytes(stream ? { stream } : undefined);
      // Between processes every block is as large as the largest (MPI_Allgather's equal blocks); a ragged one is padded, then packed back.
      const slot = Math.max(...this.#counts) * s.numel * es;
      const padded = mine.length === slot ? mine : new Uint8Array(slot);
      if (padded !== mine) padded.set(mine);
      const all = new Uint8Array(slot * this.layout.nnodes);
      await this.#onNet(fn, (net) => net.allGather(padded, all, this.#timeout(), this.#commId, kind));
      const packed = this.#ragged ? new Uint8Array(r.nbytes) : all;
      if (this.#ragged) {
        for (let p = 0; p < this.layout.nnodes; p++)
          packed.set(all.subarray(p * slot, p * slot + this.#counts[p]! * s.numel * es), this.#offsets[p]! * s.numel * es);
      }
      this.#upload(r, packed, stream);
      await this.local.broadcast(recv, recv, 0, stream);
    });
  }

  /**
   * recv = chunk `rank` of op over every rank's send. The process's ranks combine
   * locally; between processes MPI_Ireduce_scatter_block gives each process only
   * its block (its ranks' chunks), which the leader spreads and each rank copies
   * its chunk from.
   */
  override reduceScatter(send: Tensor, recv: Tensor, op: ReduceOp = 'sum', stream?: Stream): Promise<void> {
    const fn = 'reduceScatter()';
    this.#needEven(fn);
    const s = this.#netTensor(send, 'send', fn);
    const r = this.#netTensor(recv, 'recv', fn);
    if (r.dtype !== s.dtype) throw new InvalidArgumentError(`${fn}: send is ${s.dtype} but recv is ${r.dtype}; they must match.`, { fn });
    if (s.numel !== r.numel * this.size) {
      throw new InvalidArgumentError(`${fn}: send must hold size x recv = ${this.size} x ${r.numel} = ${r.numel * this.size} elements but has ${s.numel}.`, {
        fn,
      });
    }
    this.#notInPlace(s, r, fn);
    const blockElems = r.numel * this.local.size;
    const full = Tensor.empty(s.device, [s.numel], s.dtype);
    const block = Tensor.empty(s.device, [blockElems], s.dtype);
    const st = stream ?? s.device.defaultStream;
    // Pending ops keep the temporaries alive after their release.
    const release = () => {
      full.release();
      block.release();
    };
    const take = () => {
      try {
        st.native.copyD2D(r.buffer, r.byteOffset, block.buffer, block.byteOffset + this.local.rank * r.nbytes, r.nbytes, 0);
      } finally {
        release();
      }
    };
    const combine = () => this.local.allReduce(send, full, op === 'avg' ? 'sum' : op, stream);
    return this.#spread(fn, combine, block, stream, take, release, async () => {
      const host = await full.toBytes(stream ? { stream } : undefined);
      const mine = new Uint8Array(block.nbytes);
      await this.#onNet(fn, (net) => net.reduceScatter(host, mine, blockElems, DTYPE_CODE[s.dtype], REDUCE_CODE[op], this.#timeout(), this.#commId));
      if (op === 'avg') divideInPlace(mine, s.dtype, this.size);
      return mine;
    });
  }

  /**
   * The shape of reduceScatter and allToAll: `first` (local) fills what the leader's
   * net leg reads; `leg` returns this process's bytes of `spread`, which the leader
   * uploads and broadcasts locally; then `take` copies each rank's part out (stream
   * order puts it after the broadcast on every rank).
   */
  #spread(
    fn: string,
    first: () => Promise<void>,
    spread: Tensor,
    stream: Stream | undefined,
    take: () => void,
    release: () => void,
    leg: () => Promise<Uint8Array>,
  ): Promise<void> {
    if (!this.#net) {
      let both: Promise<void>;
      try {
        both = Promise.all([first(), this.local.broadcast(spread, spread, 0, stream)]).then(() => undefined);
      } catch (err) {
        release();
        throw err;
      }
      take();
      return both;
    }
    let run: Promise<void>;
    try {
      run = this.#leaderRun(fn, first, async (localDone) => {
        await localDone;
        this.#upload(spread, await leg(), stream);
        await this.local.broadcast(spread, spread, 0, stream);
      });
    } catch (err) {
      release();
      throw err;
    }
    return run.then(take, (err: Error) => {
      release();
      throw err;
    });
  }

  /** Chunk q (numel / size elements) of send goes to rank q; recv chunk q comes from rank q. */
  override allToAll(send: Tensor, recv: Tensor, stream?: Stream): Promise<void> {
    const fn = 'allToAll()';
    this.#needEven(fn);
    const s = this.#moveTensor(send, 'send', fn);
    const r = this.#moveTensor(recv, 'recv', fn);
    if (r.dtype !== s.dtype) throw new InvalidArgumentError(`${fn}: send is ${s.dtype} but recv is ${r.dtype}; they must match.`, { fn });
    if (s.numel !== r.numel || s.numel % this.size !== 0) {
      throw new InvalidArgumentError(`${fn}: send and recv must have the same numel, a multiple of size ${this.size}; got send ${s.numel}, recv ${r.numel}.`, {
        fn,
      });
    }
    this.#notInPlace(s, r, fn);
    const n = this.local.size;
    const chunkBytes = s.nbytes / this.size;
    // gathered: every local rank's send, [a][dst][chunk]; out: every local rank's recv, [b][src][chunk].
    const gathered = Tensor.empty(s.device, [n * s.numel], s.dtype);
    const out = Tensor.empty(s.device, [n * s.numel], s.dtype);
    const st = stream ?? s.device.defaultStream;
    const release = () => {
      gathered.release();
      out.release();
    };
    const take = () => {
      try {
        st.native.copyD2D(r.buffer, r.byteOffset, out.buffer, out.byteOffset + this.local.rank * r.nbytes, r.nbytes, 0);
      } finally {
        release();
      }
    };
    return this.#spread(
      fn,
      () => this.local.allGather(send, gathered, stream),
      out,
      stream,
      take,
      release,
      async () => {
        const host = await gathered.toBytes(stream ? { stream } : undefined);
        const mine = packAllToAll(host, n, this.layout.nnodes, chunkBytes);
        const got = new Uint8Array(mine.length);
        await this.#onNet(fn, (net) => net.allToAll(mine, got, this.#timeout(), this.#commId));
        return unpackAllToAll(got, n, this.layout.nnodes, chunkBytes);
      },
    );
  }

  /**
   * sendCounts[q] elements from send at sendDispls[q] go to rank q; recvCounts[q]
   * elements from rank q land in recv at recvDispls[q]. Every rank first gathers every
   * rank's counts (a mismatch fails on every rank, naming the pairs), then the data
   * moves as an allToAll padded to the largest count. Await it on every rank.
   */
  override async allToAllV(
    send: Tensor,
    sendCounts: readonly number[],
    sendDispls: readonly number[],
    recv: Tensor,
    recvCounts: readonly number[],
    recvDispls: readonly number[],
    stream?: Stream,
  ): Promise<void> {
    const fn = 'allToAllV()';
    this.#needEven(fn);
    const s = this.#moveTensor(send, 'send', fn);
    const r = this.#moveTensor(recv, 'recv', fn);
    if (r.dtype !== s.dtype) throw new InvalidArgumentError(`${fn}: send is ${s.dtype} but recv is ${r.dtype}; they must match.`, { fn });
    this.#notInPlace(s, r, fn);
    const size = this.size;
    for (const [name, a] of Object.entries({ sendCounts, sendDispls, recvCounts, recvDispls })) {
      if (!Array.isArray(a) || a.length !== size || a.some((v) => typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)) {
        throw new InvalidArgumentError(`${fn}: expected ${name} to be an array of ${size} non-negative integers but received ${describe(a)}.`, {
          fn,
          argument: name,
        });
      }
    }
    for (let q = 0; q < size; q++) {
      if (sendDispls[q]! + sendCounts[q]! > s.numel) {
        throw new InvalidArgumentError(`${fn}: sendDispls[${q}] + sendCounts[${q}] = ${sendDispls[q]! + sendCounts[q]!} exceeds send's ${s.numel} elements.`, {
          fn,
        });
      }
      if (recvDispls[q]! + recvCounts[q]! > r.numel) {
        throw new InvalidArgumentError(`${fn}: recvDispls[${q}] + recvCounts[${q}] = ${recvDispls[q]! + recvCounts[q]!} exceeds recv's ${r.numel} elements.`, {
          fn,
        });
      }
    }
    const opts = stream ? { stream } : undefined;
    const row = Tensor.fromArray(
      this.device,
      BigInt64Array.from([...sendCounts, ...recvCounts], (v) => BigInt(v)),
      [2 * size],
      opts,
    );
    const rows = Tensor.zeros(this.device, [2 * size * size], 'int64', opts);
    let max: number;
    try {
      await this.#allGather(row, rows, stream, NET_KIND_ALLTOALLV_COUNTS);
      max = checkAllToAllVCounts((await rows.toArray(opts)) as BigInt64Array, size);
    } finally {
      row.release();
      rows.release();
    }
    if (max === 0) return;
    const es = dtypeSize(s.dtype);
    const st = stream ?? this.device.defaultStream;
    const sendPad = Tensor.empty(this.device, [size * max], s.dtype);
    const recvPad = Tensor.empty(this.device, [size * max], s.dtype);
    try {
      for (let q = 0; q < size; q++) {
        const bytes = sendCounts[q]! * es;
        if (bytes > 0) st.native.copyD2D(sendPad.buffer, sendPad.byteOffset + q * max * es, s.buffer, s.byteOffset + sendDispls[q]! * es, bytes, 0);
      }
      await this.allToAll(sendPad, recvPad, stream);
      for (let q = 0; q < size; q++) {
        const bytes = recvCounts[q]! * es;
        if (bytes > 0) st.native.copyD2D(r.buffer, r.byteOffset + recvDispls[q]! * es, recvPad.buffer, recvPad.byteOffset + q * max * es, bytes, 0);
      }
    } finally {
      sendPad.release();
      recvPad.release();
    }
  }

  override barrier(stream?: Stream): Promise<void> {
    const arrive = () => this.local.barrier(stream);
    if (!this.#net) return Promise.all([arrive(), this.local.barrier(stream)]).then(() => undefined);
    return this.#leaderRun('barrier()', arrive, async (first) => {
      await first;
      await this.#onNet('barrier()', (net) => net.barrier(this.#timeout(), this.#commId));
      await this.local.barrier(stream);
    });
  }

  // ------------------------------------------------------------------ P2P

  /** Sends `t` to `peer` (see Communicator.send); to another process over the net thread, tagged by the pair. */
  override send(t: Tensor, peer: number, stream?: Stream): Promise<void> {
    return this.#p2p(t, peer, stream, true);
  }

  override recv(t: Tensor, peer: number, stream?: Stream): Promise<void> {
    return this.#p2p(t, peer, stream, false);
  }

  #p2p(t: Tensor, peer: number, stream: Stream | undefined, isSend: boolean): Promise<void> {
    const fn = isSend ? 'send()' : 'recv()';
    const x = this.#moveTensor(t, 'tensor', fn);
    if (typeof peer !== 'number' || !Number.isInteger(peer) || peer < 0 || peer >= this.size || peer === this.rank) {
      throw new InvalidArgumentError(
        `Expected a peer rank in [0, ${this.size}) other than this rank (${this.rank}) for ${fn} but received ${describe(peer)}.`,
        { fn, argument: 'peer' },
      );
    }
    const { process: peerProcess, local: peerLocal } = this.#locate(peer);
    if (peerProcess === this.layout.nodeRank) return isSend ? this.local.send(x, peerLocal, stream) : this.local.recv(x, peerLocal, stream);
    const site = {
      local: this.local,
      // Tags number pairs of local ranks by the largest process's count (the same on both sides).
      pairBase: Math.max(...this.#counts),
      rank: this.rank,
      process: this.layout.nodeRank,
      processes: this.layout.nnodes,
      commId: this.#commId,
      timeoutMs: this.#timeout(),
      worldRanksPerProcess: this.#worldRanksPerProcess,
    };
    return this.#p2pAcross.transfer(site, x, peer, peerProcess, peerLocal, stream, isSend);
  }

  /** Sends / recvs inside a group are posted at once (the net thread never blocks on them); groupEnd() awaits them all. */
  override groupStart(): void {
    this.#p2pAcross.groupStart(this.local);
  }

  override groupEnd(): Promise<void> {
    return this.#p2pAcross.groupEnd(this.local);
  }

  // ------------------------------------------------------------------ split

  /**
   * MPI_Comm_split over processes: every rank gathers every rank's (color, key); a color
   * whose ranks all sit in one process is a split of that process's communicator, one
   * that spans processes is a SpanningCommunicator over a new communicator among its
   * processes (spanning-plan.ts checks its shape on every rank). Await it on every rank.
   */
  override async split(color: number | null, key: number = this.rank, options?: SplitOptions): Promise<Communicator | null> {
    checkOptions(options, ['connectTimeoutMs', 'execTimeoutMs', 'traceDir'], 'split()');
    const c = color === null ? -1 : color;
    if (typeof c !== 'number' || !Number.isInteger(c) || c < -1 || c > 2147483647) {
      throw new InvalidArgumentError(
        `Expected a color that is a non-negative integer, or -1 / null for no communicator, for split() but received ${describe(color)}.`,
        { argument: 'color' },
      );
    }
    if (typeof key !== 'number' || !Number.isInteger(key) || key < -2147483648 || key > 2147483647) {
      throw new InvalidArgumentError(`Expected an integer in [-2147483648, 2147483647] for key but received ${describe(key)}.`, { argument: 'key' });
    }
    const fn = 'split()';
    this.#needEven(fn);
    const n = this.local.size;
    const mine = Tensor.fromArray(this.device, new BigInt64Array([BigInt(c), BigInt(key)]), [2]);
    const all = Tensor.zeros(this.device, [2 * this.size], 'int64');
    let pairs: BigInt64Array;
    try {
      await this.allGather(mine, all);
      pairs = (await all.toArray()) as BigInt64Array;
    } finally {
      mine.release();
      all.release();
    }
    const plan = planSplit(pairs, n);
    const prefix = `${this.#commId}/${this.#splits++}`;
    if (plan.spanning.length > 0) {
      if (this.#net) {
        const member = Uint8Array.from(plan.spanning, (col) => (plan.groups.get(col)!.some((r) => Math.floor(r / n) === this.layout.nodeRank) ? 1 : 0));
        await this.#leaderRun(
          fn,
          () => undefined,
          () => this.#onNet(fn, (net) => net.split(this.#commId, Int32Array.from(plan.spanning), member, prefix, this.#timeout())).then(() => undefined),
        );
      }
      // The leader registered the new communicators among processes before it arrives here.
      await this.local.barrier();
    }
    const localSub = await this.local.split(c, key, options);
    if (localSub === null) return null;
    if (!plan.spanning.includes(c)) return localSub;
    const procs = [...new Set(plan.groups.get(c)!.map((r) => Math.floor(r / n)))];
    const commId = loadNet().lookupComm(`${prefix}:${c}`);
    if (commId < 0) throw new InternalError(`split(): the communicator among processes for color ${c} was not registered in process ${this.layout.nodeRank}.`);
    return new SpanningCommunicator(
      localSub,
      { nodeRank: procs.indexOf(this.layout.nodeRank), nnodes: procs.length },
      {
        commId,
        worldRanksPerProcess: this.#worldRanksPerProcess,
        counts: plan.counts.get(c)!,
      },
    );
  }

  /** Aborts this process's ranks and tells every other process (their ranks fail at once, naming this one). */
  override abort(reason = 'abort() called'): void {
    this.local.abort(reason);
    void this.#net?.abortJob(`rank ${this.rank} aborted the world communicator: ${reason}`, 2000).catch(() => undefined);
  }

  override toString(): string {
    const ragged = this.#ragged ? `, ragged [${this.#counts.join(', ')}]` : '';
    return `SpanningCommunicator(rank ${this.rank} of ${this.size}, process ${this.layout.nodeRank} of ${this.layout.nnodes}, local ${this.local.rank} of ${this.local.size}${ragged})`;
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
