/**
 * Communicators (HCCL / NCCL shape) between the ranks of this process. One rank
 * calls `Communicator.uniqueId()` and shares it; every rank calls
 * `Communicator.initRank({ uniqueId, nranks, rank, device })`. Collectives are
 * enqueued on a stream of the communicator's device and return a promise that
 * resolves once the op ran (stream order is kept whether or not it is awaited).
 * Collectives enqueued back to back cost one host wake-up per run, not per op: the
 * stream thread holds their completions back and posts them together (see
 * native/device/stream.h, "Batched completions"); a failure is never held back, and a
 * collective skipped behind a failed op aborts the communicator natively, so peers fail
 * at once whether or not anyone awaits it.
 *
 * Counts follow NCCL: allReduce / broadcast move `numel` elements per rank;
 * allGather's recv holds size x send; reduceScatter's send holds size x recv;
 * allToAll sends numel / size elements to each peer. Send and recv may be the same
 * tensor (in place); allGather in place means send is rank r's chunk of recv,
 * reduceScatter in place means recv is rank r's chunk of send.
 *
 * Every collective carries a per-communicator sequence number and a fingerprint
 * (op, dtype, count, reduce op, root) checked across ranks before data moves
 * (CollectiveMismatchError on every rank); every wait has a deadline
 * (CollectiveTimeoutError naming the missing ranks); any error aborts the
 * communicator for all ranks (later calls: CommAbortedError at once) and writes a
 * flight-recorder JSON (format: native/comm/dump.cc) into the trace directory.
 *
 * Every CollectiveMismatchError, CollectiveTimeoutError, P2PDeadlockError and
 * CommAbortedError a communicator raises carries `details.culpritWorldRanks`: the
 * world ranks most likely at fault (mismatch: the ranks whose call differs from the
 * majority, on a tie from the lowest rank's; timeout: the ranks that never arrived;
 * recv without send: the peer; deadlock: the cycle; abort: the rank that died or
 * called abort(), empty when unknown). Messages and rank-list details give world
 * ranks, plus local ones on a split communicator (`missing: world rank 3 (local 1)`;
 * details `missing` / `missingLocal`).
 *
 * TS validates every argument here with precise messages (synchronously, before
 * any side effect); native re-checks as a safety net.
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Device, checkOptions } from '../device/device.js';
import { DTYPE_CODE, describe, type DType } from '../device/dtype.js';
import { envInt, envString } from '../env.js';
import { InvalidArgumentError } from '../errors.js';
import { enqueueWithCompletion, loadNative, newCompletionToken, registerCompletion, withCallerStack, type NativeCommunicator } from '../native.js';
import { Stream } from '../device/stream.js';
import { Tensor } from '../device/tensor.js';
import { OpCompletion } from './op-completion.js';

export type ReduceOp = 'sum' | 'prod' | 'max' | 'min' | 'avg';
export const REDUCE_OPS: readonly ReduceOp[] = ['sum', 'prod', 'max', 'min', 'avg'];
const REDUCE_CODE: Readonly<Record<ReduceOp, number>> = { sum: 0, prod: 1, max: 2, min: 3, avg: 4 };

/** Dtypes collectives accept. */
export const COMM_DTYPES: readonly DType[] = ['fp32', 'bf16', 'fp16', 'int32', 'int64'];

export interface CommTimeouts {
  /**
   * Rendezvous deadline (init, and split: the whole split, from its call to the new
   * communicator being ready). Default: HCCL_CONNECT_TIMEOUT seconds (120).
   */
  connectTimeoutMs?: number;
  /** Deadline of each collective / P2P wait. Default: HCCL_EXEC_TIMEOUT seconds (1800). */
  execTimeoutMs?: number;
  /** Where flight-recorder dumps go. Default: ASCENT_TRACE_DIR, else `${os.tmpdir()}/ascent-flight-recorder`. */
  traceDir?: string;
}

export interface InitRankOptions extends CommTimeouts {
  uniqueId: string;
  nranks: number;
  rank: number;
  /** This rank's device (or its ordinal). */
  device: Device | number;
}

export type SplitOptions = CommTimeouts;

/** Parsed flight-recorder dump (see native/comm/dump.cc for the format). */
export interface FlightRecord {
  format: 'ascent.flight-recorder';
  version: 1;
  communicator: string;
  nranks: number;
  /** True for a communicator made by initRank; false for a split (see worldRank). */
  world: boolean;
  createdAtMs: number;
  dumpedAtMs: number;
  cause: { code: string; message: string; seq: number | null; culpritWorldRanks: number[] };
  ranks: Array<{
    rank: number;
    worldRank: number;
    device: number;
    joined: boolean;
    lastEnqueued: FlightMark | null;
    lastStarted: FlightMark | null;
    lastCompleted: FlightMark | null;
    entries: FlightEntry[];
  }>;
}
export interface FlightMark {
  id: number;
  seq: number | null;
  op: string;
  atMs: number;
}
export interface FlightEntry {
  id: number;
  seq: number | null;
  op: string;
  fingerprint: string;
  state: 'enqueued' | 'started' | 'completed' | 'failed';
  enqueuedAtMs: number;
  startedAtMs: number | null;
  endedAtMs: number | null;
  error: string | null;
}

function checkMs(value: unknown, what: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new InvalidArgumentError(`Expected a positive finite number of milliseconds for ${what} but received ${describe(value)}.`, { argument: what });
  }
  return value;
}

function checkInt(value: unknown, what: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(`Expected an integer in [${min}, ${max}] for ${what} but received ${describe(value)}.`, { argument: what });
  }
  return value;
}

/** The settings a communicator runs with (options over the environment defaults). */
export interface CommSettings {
  connectTimeoutMs: number;
  execTimeoutMs: number;
  traceDir: string;
}
type Resolved = CommSettings;

/** Per-communicator settings over the environment defaults. */
function resolveTimeouts(opts: CommTimeouts | undefined, parent?: Resolved): Resolved {
  const connect = opts?.connectTimeoutMs ?? parent?.connectTimeoutMs ?? (envInt('HCCL_CONNECT_TIMEOUT') ?? 120) * 1000;
  const exec = opts?.execTimeoutMs ?? parent?.execTimeoutMs ?? (envInt('HCCL_EXEC_TIMEOUT') ?? 1800) * 1000;
  const traceDir = opts?.traceDir ?? parent?.traceDir ?? envString('ASCENT_TRACE_DIR') ?? join(tmpdir(), 'ascent-flight-recorder');
  if (typeof traceDir !== 'string' || traceDir === '') {
    throw new InvalidArgumentError(`Expected a non-empty directory path for traceDir but received ${describe(traceDir)}.`, { argument: 'traceDir' });
  }
  return { connectTimeoutMs: checkMs(connect, 'connectTimeoutMs'), execTimeoutMs: checkMs(exec, 'execTimeoutMs'), traceDir };
}

/** A promise for the ops of the current group (send/recv inside groupStart/groupEnd). */
interface OpenGroup {
  depth: number;
  items: number;
  promise: Promise<void>;
  resolve(): void;
  reject(err: Error): void;
}

export class Communicator {
  /** @internal */
  readonly native: NativeCommunicator;
  readonly device: Device;
  readonly #settings: Resolved;
  #group: OpenGroup | undefined;

  protected constructor(native: NativeCommunicator, device: Device, settings: Resolved) {
    this.native = native;
    this.device = device;
    this.#settings = settings;
  }

  /** A fresh random id (128-bit, hex) for `initRank`; create it on one rank and share it. */
  static uniqueId(): string {
    return loadNative().commUniqueId();
  }

  /**
   * Joins communicator `uniqueId` as `rank` of `nranks`; resolves once every rank
   * joined (rejects with CollectiveTimeoutError naming the missing ranks after
   * `connectTimeoutMs`). Bad arguments throw InvalidArgumentError synchronously.
   */
  static initRank(options: InitRankOptions): Promise<Communicator> {
    checkOptions(options, ['uniqueId', 'nranks', 'rank', 'device', 'connectTimeoutMs', 'execTimeoutMs', 'traceDir'], 'Communicator.initRank()');
    if (options === undefined) throw new InvalidArgumentError('Communicator.initRank() requires { uniqueId, nranks, rank, device }.');
    const { uniqueId } = options;
    if (typeof uniqueId !== 'string' || !/^[0-9a-f]{32}$/.test(uniqueId)) {
      throw new InvalidArgumentError(`Expected a uniqueId of 32 hex digits (from Communicator.uniqueId()) but received ${describe(uniqueId)}.`, {
        argument: 'uniqueId',
      });
    }
    const nranks = checkInt(options.nranks, 'nranks', 1, 4096);
    const rank = checkInt(options.rank, 'rank', 0, nranks - 1);
    const device = options.device instanceof Device ? options.device : Device.get(checkInt(options.device, 'device', 0, 1023));
    const settings = resolveTimeouts(options);
    const site = new Error();
    let native!: NativeCommunicator;
    const { promise } = enqueueWithCompletion((token) => {
      native = loadNative().commInitRank(uniqueId, nranks, rank, device.ordinal, settings.connectTimeoutMs, settings.execTimeoutMs, settings.traceDir, token);
    });
    return promise.then(
      () => new Communicator(native, device, settings),
      (err: Error) => {
        throw withCallerStack(err, site);
      },
    );
  }

  /**
   * Aborts communicator `id` for every rank from any thread (the main thread calls
   * it when a rank's worker dies). `culpritWorldRanks` (e.g. the dead rank) becomes
   * `details.culpritWorldRanks` of every error the abort causes; default: none
   * known. Returns false when no live communicator has it.
   */
  static abortById(id: string, reason: string, culpritWorldRanks: readonly number[] = []): boolean {
    if (typeof id !== 'string' || typeof reason !== 'string') throw new InvalidArgumentError('Communicator.abortById(id, reason) expects two strings.');
    if (!Array.isArray(culpritWorldRanks) || culpritWorldRanks.some((r) => !Number.isInteger(r) || r < 0)) {
      throw new InvalidArgumentError(
        `Communicator.abortById(): expected culpritWorldRanks to be an array of world ranks (non-negative integers) but received ${describe(culpritWorldRanks)}.`,
        { argument: 'culpritWorldRanks' },
      );
    }
    const abortById = loadNative().commAbortById as (id: string, reason: string, culpritWorldRanks: number[]) => boolean;
    return abortById(id, reason, [...culpritWorldRanks]);
  }

  get rank(): number {
    return this.native.rank;
  }

  /**
   * True when this communicator's ranks sit in more than one process. Then a collective's
   * recv is complete only when its promise resolves (the leader's leg between processes
   * runs on the host): a caller must await it before enqueuing work that reads recv.
   * In one process recv is ready in stream order, so callers may pipeline without awaiting.
   */
  get spansProcesses(): boolean {
    return false;
  }

  get size(): number {
    return this.native.size;
  }

  get id(): string {
    return this.native.id;
  }

  get aborted(): boolean {
    return this.native.aborted;
  }

  /** The error that aborted the communicator, or null. */
  get abortCause(): Error | null {
    return this.native.abortCause();
  }

  get settings(): Readonly<CommSettings> {
    return this.#settings;
  }

  // ------------------------------------------------------------------ validation

  #stream(stream: Stream | undefined, fn: string): Stream {
    if (stream === undefined) return this.device.defaultStream;
    if (!(stream instanceof Stream)) throw new InvalidArgumentError(`Expected a Stream for ${fn} but received ${describe(stream)}.`, { fn });
    if (stream.device.ordinal !== this.device.ordinal) {
      throw new InvalidArgumentError(
        `Expected a stream of device ${this.device.ordinal} (rank ${this.rank}'s device in communicator ${this.id.slice(0, 8)}…) for ${fn} but the stream belongs to device ${stream.device.ordinal}. HINT: enqueue collectives on a stream of the communicator's own device (device.defaultStream or device.newStream()).`,
        { fn, expectedDevice: this.device.ordinal, streamDevice: stream.device.ordinal },
      );
    }
    return stream;
  }

  #tensor(t: unknown, name: string, fn: string): Tensor {
    if (!(t instanceof Tensor)) throw new InvalidArgumentError(`Expected a Tensor for ${name} of ${fn} but received ${describe(t)}.`, { fn, argument: name });
    t.checkLive(name);
    if (!COMM_DTYPES.includes(t.dtype)) {
      throw new InvalidArgumentError(`${fn} supports ${COMM_DTYPES.join(', ')} but ${name} is ${t.dtype}.`, { fn, argument: name, dtype: t.dtype });
    }
    if (t.device.ordinal !== this.device.ordinal) {
      throw new InvalidArgumentError(
        `Expected ${name} of ${fn} on device ${this.device.ordinal} (rank ${this.rank}'s device) but it is on device ${t.device.ordinal}. HINT: copyPeer() it to this rank's device first.`,
        { fn, argument: name, expectedDevice: this.device.ordinal, actualDevice: t.device.ordinal },
      );
    }
    if (!t.isContiguous) throw new InvalidArgumentError(`${name} of ${fn} must be contiguous.`, { fn, argument: name });
    return t;
  }

  #pair(send: unknown, recv: unknown, fn: string): [Tensor, Tensor] {
    const s = this.#tensor(send, 'send', fn);
    const r = this.#tensor(recv, 'recv', fn);
    if (s.dtype !== r.dtype) throw new InvalidArgumentError(`${fn}: send is ${s.dtype} but recv is ${r.dtype}; they must match.`, { fn });
    return [s, r];
  }

  #op(op: unknown, fn: string): number {
    if (typeof op !== 'string' || !(op in REDUCE_CODE)) {
      throw new InvalidArgumentError(`Expected one of ${REDUCE_OPS.join(', ')} for the reduce op of ${fn} but received ${describe(op)}.`, {
        fn,
        argument: 'op',
      });
    }
    return REDUCE_CODE[op as ReduceOp];
  }

  /** In place must be exact: same buffer, and recv (or send) at the expected offset; partial overlap is an error. */
  #checkOverlap(send: Tensor, recv: Tensor, fn: string, inPlaceSendOffset: number): void {
    if (send.buffer.id !== recv.buffer.id) return;
    const sEnd = send.byteOffset + send.nbytes;
    const rEnd = recv.byteOffset + recv.nbytes;
    const overlap = send.nbytes > 0 && recv.nbytes > 0 && send.byteOffset < rEnd && recv.byteOffset < sEnd;
    if (overlap && send.byteOffset !== inPlaceSendOffset) {
      throw new InvalidArgumentError(
        `${fn}: send and recv overlap without being in place. HINT: pass the same tensor (or the rank's chunk of it) for in place, or non-overlapping tensors.`,
        { fn },
      );
    }
  }

  /**
   * The completion of the op just enqueued with `token` (from newCompletionToken()). The
   * promise may be ignored (NCCL style: enqueue, then stream.synchronize()): a failure is
   * then not an unhandled rejection, and the stream still reports it. Called by the public
   * method itself, so the captured stack names its caller.
   */
  #completion(token: number, fn: string, stream: Stream): Promise<void> {
    const op = new OpCompletion(this, fn, stream, new Error());
    registerCompletion(token, op);
    return op.promise;
  }

  // ------------------------------------------------------------------ collectives

  /** recv = op over every rank's send (same numel everywhere). bf16/fp16 accumulate in fp32; avg of ints truncates. */
  allReduce(send: Tensor, recv: Tensor, op: ReduceOp = 'sum', stream?: Stream): Promise<void> {
    const fn = 'allReduce()';
    const [s, r] = this.#pair(send, recv, fn);
    const code = this.#op(op, fn);
    const st = this.#stream(stream, fn);
    if (s.numel !== r.numel) throw new InvalidArgumentError(`${fn}: send has ${s.numel} elements but recv has ${r.numel}; they must be equal.`, { fn });
    this.#checkOverlap(s, r, fn, r.byteOffset);
    const token = newCompletionToken();
    this.native.allReduce(s.buffer, s.byteOffset, r.buffer, r.byteOffset, s.numel, DTYPE_CODE[s.dtype], code, st.native, token);
    return this.#completion(token, 'allReduce', st);
  }

  /** recv = root's send on every rank. In place when send === recv; non-root sends are ignored. */
  broadcast(send: Tensor, recv: Tensor, root: number, stream?: Stream): Promise<void> {
    const fn = 'broadcast()';
    const [s, r] = this.#pair(send, recv, fn);
    checkInt(root, 'root', 0, this.size - 1);
    const st = this.#stream(stream, fn);
    if (s.numel !== r.numel) throw new InvalidArgumentError(`${fn}: send has ${s.numel} elements but recv has ${r.numel}; they must be equal.`, { fn });
    this.#checkOverlap(s, r, fn, r.byteOffset);
    const token = newCompletionToken();
    this.native.broadcast(s.buffer, s.byteOffset, r.buffer, r.byteOffset, s.numel, DTYPE_CODE[s.dtype], root, st.native, token);
    return this.#completion(token, 'broadcast', st);
  }

  /** recv (size x send.numel) = every rank's send, in rank order. */
  allGather(send: Tensor, recv: Tensor, stream?: Stream): Promise<void> {
    const fn = 'allGather()';
    const [s, r] = this.#pair(send, recv, fn);
    const st = this.#stream(stream, fn);
    if (r.numel !== s.numel * this.size) {
      throw new InvalidArgumentError(`${fn}: recv must hold size x send = ${this.size} x ${s.numel} = ${s.numel * this.size} elements but has ${r.numel}.`, {
        fn,
      });
    }
    this.#checkOverlap(s, r, fn, r.byteOffset + this.rank * s.nbytes);
    const token = newCompletionToken();
    this.native.allGather(s.buffer, s.byteOffset, r.buffer, r.byteOffset, s.numel, DTYPE_CODE[s.dtype], st.native, token);
    return this.#completion(token, 'allGather', st);
  }

  /** recv = chunk `rank` (recv.numel elements) of op over every rank's send (size x recv.numel). */
  reduceScatter(send: Tensor, recv: Tensor, op: ReduceOp = 'sum', stream?: Stream): Promise<void> {
    const fn = 'reduceScatter()';
    const [s, r] = this.#pair(send, recv, fn);
    const code = this.#op(op, fn);
    const st = this.#stream(stream, fn);
    if (s.numel !== r.numel * this.size) {
      throw new InvalidArgumentError(`${fn}: send must hold size x recv = ${this.size} x ${r.numel} = ${r.numel * this.size} elements but has ${s.numel}.`, {
        fn,
      });
    }
    this.#checkOverlap(s, r, fn, r.byteOffset - this.rank * r.nbytes);
    const token = newCompletionToken();
    this.native.reduceScatter(s.buffer, s.byteOffset, r.buffer, r.byteOffset, r.numel, DTYPE_CODE[s.dtype], code, st.native, token);
    return this.#completion(token, 'reduceScatter', st);
  }

  /** Chunk q (numel / size elements) of send goes to rank q; recv chunk q comes from rank q. */
  allToAll(send: Tensor, recv: Tensor, stream?: Stream): Promise<void> {
    const fn = 'allToAll()';
    const [s, r] = this.#pair(send, recv, fn);
    const st = this.#stream(stream, fn);
    if (s.numel !== r.numel || s.numel % this.size !== 0) {
      throw new InvalidArgumentError(`${fn}: send and recv must have the same numel, a multiple of size ${this.size}; got send ${s.numel}, recv ${r.numel}.`, {
        fn,
      });
    }
    this.#checkOverlap(s, r, fn, r.byteOffset);
    const token = newCompletionToken();
    this.native.allToAll(s.buffer, s.byteOffset, r.buffer, r.byteOffset, s.numel / this.size, DTYPE_CODE[s.dtype], st.native, token);
    return this.#completion(token, 'allToAll', st);
  }

  /**
   * sendCounts[q] elements from send at sendDispls[q] go to rank q; recvCounts[q]
   * elements from rank q land in recv at recvDispls[q] (elements). Rank q's
   * sendCounts[r] must equal rank r's recvCounts[q] (else CollectiveMismatchError).
   */
  allToAllV(
    send: Tensor,
    sendCounts: readonly number[],
    sendDispls: readonly number[],
    recv: Tensor,
    recvCounts: readonly number[],
    recvDispls: readonly number[],
    stream?: Stream,
  ): Promise<void> {
    const fn = 'allToAllV()';
    const [s, r] = this.#pair(send, recv, fn);
    const st = this.#stream(stream, fn);
    const arrays = { sendCounts, sendDispls, recvCounts, recvDispls };
    for (const [name, a] of Object.entries(arrays)) {
      if (!Array.isArray(a) || a.length !== this.size || a.some((v) => typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)) {
        throw new InvalidArgumentError(`${fn}: expected ${name} to be an array of ${this.size} non-negative integers but received ${describe(a)}.`, {
          fn,
          argument: name,
        });
      }
    }
    for (let q = 0; q < this.size; q++) {
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
    const token = newCompletionToken();
    this.native.allToAllV(
      s.buffer,
      s.byteOffset,
      [...sendCounts],
      [...sendDispls],
      r.buffer,
      r.byteOffset,
      [...recvCounts],
      [...recvDispls],
      DTYPE_CODE[s.dtype],
      st.native,
      token,
    );
    return this.#completion(token, 'allToAllV', st);
  }

  /** Resolves once every rank reached it. */
  barrier(stream?: Stream): Promise<void> {
    const st = this.#stream(stream, 'barrier()');
    const token = newCompletionToken();
    this.native.barrier(st.native, token);
    return this.#completion(token, 'barrier', st);
  }

  // ------------------------------------------------------------------ P2P

  /**
   * Sends `t` to `peer`; the k-th send to a peer matches the peer's k-th recv from
   * this rank (same dtype and numel). Outside a group it completes when the peer
   * has copied it; two ranks that plain-send to each other first deadlock
   * (P2PDeadlockError): put exchanges in groupStart() / groupEnd().
   */
  send(t: Tensor, peer: number, stream?: Stream): Promise<void> {
    return this.#p2p(t, peer, stream, true);
  }

  /** Receives into `t` from `peer` (see send()). */
  recv(t: Tensor, peer: number, stream?: Stream): Promise<void> {
    return this.#p2p(t, peer, stream, false);
  }

  #p2p(t: Tensor, peer: number, stream: Stream | undefined, isSend: boolean): Promise<void> {
    const fn = isSend ? 'send()' : 'recv()';
    const x = this.#tensor(t, isSend ? 'tensor' : 'tensor', fn);
    if (typeof peer !== 'number' || !Number.isInteger(peer) || peer < 0 || peer >= this.size || peer === this.rank) {
      throw new InvalidArgumentError(
        `Expected a peer rank in [0, ${this.size}) other than this rank (${this.rank}) for ${fn} but received ${describe(peer)}.`,
        { fn, argument: 'peer' },
      );
    }
    const st = this.#stream(stream, fn);
    const enqueue = isSend ? this.native.send : this.native.recv;
    const g = this.#group;
    if (g) {
      enqueue.call(this.native, x.buffer, x.byteOffset, x.numel, DTYPE_CODE[x.dtype], peer, st.native, 0);
      g.items++;
      return g.promise;
    }
    const token = newCompletionToken();
    enqueue.call(this.native, x.buffer, x.byteOffset, x.numel, DTYPE_CODE[x.dtype], peer, st.native, token);
    return this.#completion(token, isSend ? 'send' : 'recv', st);
  }

  /** Starts (or nests) a group: send/recv until the matching groupEnd() run as one op that posts every send first. */
  groupStart(): void {
    this.native.groupStart();
    if (this.#group) {
      this.#group.depth++;
      return;
    }
    let resolve!: () => void;
    let reject!: (err: Error) => void;
    const promise = new Promise<void>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    promise.catch(() => undefined); // the caller may only await groupEnd()
    this.#group = { depth: 1, items: 0, promise, resolve, reject };
  }

  /**
   * Ends a group; the outermost groupEnd enqueues the group's sends and recvs as one
   * op and returns its completion (also returned by each send/recv of the group).
   * Collectives called inside a group are not deferred.
   */
  groupEnd(): Promise<void> {
    const g = this.#group;
    if (!g) throw new InvalidArgumentError('groupEnd() without a matching groupStart().');
    if (g.depth > 1) {
      this.native.groupEnd(0);
      g.depth--;
      return g.promise;
    }
    this.#group = undefined;
    if (g.items === 0) {
      this.native.groupEnd(0);
      g.resolve();
      return g.promise;
    }
    const site = new Error();
    let run: Promise<void>;
    try {
      const { token, promise } = enqueueWithCompletion((tok) => {
        this.native.groupEnd(tok);
      });
      run = promise.then(
        () => undefined,
        (err: Error) => {
          throw withCallerStack(err, site);
        },
      );
      void token;
    } catch (e) {
      g.reject(e as Error);
      throw e;
    }
    run.then(g.resolve, g.reject);
    run.catch(() => undefined);
    return run;
  }

  // ------------------------------------------------------------------ split, abort

  /**
   * MPI_Comm_split, collective over this communicator: ranks passing the same color
   * form a new communicator ordered by key (ties by rank here); color -1 or null
   * gives null. Settings default to this communicator's. The split waits for every
   * rank under `connectTimeoutMs` (HCCL_CONNECT_TIMEOUT), like init; the new
   * communicator's collectives under `execTimeoutMs`.
   */
  split(color: number | null, key: number = this.rank, options?: SplitOptions): Promise<Communicator | null> {
    checkOptions(options, ['connectTimeoutMs', 'execTimeoutMs', 'traceDir'], 'split()');
    const c = color === null ? -1 : color;
    if (typeof c !== 'number' || !Number.isInteger(c) || c < -1 || c > 2147483647) {
      throw new InvalidArgumentError(
        `Expected a color that is a non-negative integer, or -1 / null for no communicator, for split() but received ${describe(color)}.`,
        { argument: 'color' },
      );
    }
    checkInt(key, 'key', -2147483648, 2147483647);
    const settings = resolveTimeouts(options, this.#settings);
    const site = new Error();
    let child!: NativeCommunicator;
    const { promise } = enqueueWithCompletion((token) => {
      child = this.native.split(c, key, settings.connectTimeoutMs, settings.execTimeoutMs, settings.traceDir, token);
    });
    return promise.then(
      () => (c < 0 ? null : new Communicator(child, this.device, settings)),
      (err: Error) => {
        throw withCallerStack(err, site);
      },
    );
  }

  /** Aborts the communicator for every rank: waiters wake at once with CommAbortedError. */
  abort(reason = 'abort() called'): void {
    if (typeof reason !== 'string') throw new InvalidArgumentError(`Expected a string reason for abort() but received ${describe(reason)}.`);
    this.native.abort(reason);
  }

  /** Local: later calls on this communicator throw; ops already enqueued still run. */
  destroy(): void {
    this.native.destroy();
  }

  /** The flight recorder of every rank, as the dump would write it. */
  flightRecord(): FlightRecord {
    return JSON.parse(this.native.flightRecord()) as FlightRecord;
  }

  toString(): string {
    return `Communicator(${this.id.slice(0, 8)}…, rank ${this.rank} of ${this.size}, device ${this.device.ordinal})`;
  }
}
