/**
 * ServerSync: the rollout engine runs on its own ranks (a standalone server group).
 * `comm` spans the trainer ranks (group ranks 0..trainerRanks-1) and the engine ranks
 * (the rest). A full sync:
 *   1. every rank all-gathers the trainer ranks' weight-source descriptors (plain JSON:
 *      placements, parts, HF mappings, owners; parallel/weight-sources.ts), so all ranks
 *      compute the same per-trainer-rank bucket plans (server-plan.ts);
 *   2. rounds of broadcasts: for bucket index b, for each trainer rank r that has a b-th
 *      bucket, each large segment of it is broadcast by r in place from the parameter it
 *      owns (no packing copy), and its small ones (at most `coalesceBytes`) packed into one
 *      staging buffer and broadcast at once (buckets.ts packSmall: every rank derives the
 *      same packing from the plan; for a small model each broadcast is a rendezvous that
 *      costs far more than its bytes), over a communicator of r and the engine ranks only
 *      (made at the first sync; other trainer ranks never receive it). The bucket plan
 *      groups the segments; at most two buckets are in flight. A round whose segments are
 *      all small on every trainer rank (a small model: every round) is instead one
 *      allToAllV over `comm` (server-gather.ts): one rendezvous, not one per trainer rank;
 *   3. engine ranks receive on the engine's stream: a segment that is one contiguous
 *      region of a preprocessed parameter on this rank is delivered straight into it;
 *      the rest lands in two alternating slots (sized to what goes through them) and is
 *      sliced into the parameters from there (Receiver). Nothing is assembled whole unless
 *      trainer tp != engine tp. The whole sync is one reload session of the engine: after
 *      the last round the slots are freed and its finish() runs the post-load processing
 *      once (a failed sync aborts the session, so the engine takes the next attempt).
 * A 'bfloat16' engine (its precision is exchanged with the sources) gets its matmul weights
 * as bf16: the trainers cast their pieces of those sources before the first transfer
 * (wire.ts), so every collective moves half their bytes, and slots and staging hold the
 * bf16 segments at their usual 64-byte aligned offsets.
 * Verification (optional): after a full sync, exact fingerprints of every tensor region
 * on every engine rank against the trainers' (fingerprint-check.ts); with a probe, the
 * trainers all-reduce their probe log-probs to every rank and each engine rank compares
 * its own. Every engine rank's verdict is all-gathered, so trainer and engine ranks
 * return (or throw) the same, naming the engine rank that differs.
 */
import { Tensor, type Event, type Stream } from '../runtime/device/device-index.js';
import type { Communicator } from '../runtime/comm/comm.js';
import { SpanningCommunicator } from '../runtime/comm/spanning-comm.js';
import { InvalidArgumentError, WeightSyncError } from '../runtime/errors.js';
import { checkOptions } from '../runtime/device/device.js';
import { viewOf } from '../runtime/device/views.js';
import { CopyRanges } from '../runtime/device/copy-ranges.js';
import type { ModelConfig } from '../model/config.js';
import type { RolloutEngine } from '../rollout/engine.js';
import { serverAdapterSync } from './server-lora.js';
import { engineBaseCopies, markEngineBaseWeights } from '../rollout/lora.js';
import type { TrainStrategy } from '../train/strategy.js';
import { describeSource, type RankSources, type SourceDescriptor } from '../parallel/weight-sources.js';
import type { Bucket, Segment } from './buckets.js';
import { checkBucketBytes, DEFAULT_BUCKET_BYTES, finishReport, MemoryMeter, type SyncOptions, type SyncReport, type Verified } from './report.js';
import { onWire } from './wire.js';
import { dtypeSize, type DType } from '../runtime/device/dtype.js';
import { checkEngineDtype, type EngineDtype } from '../rollout/weight-dtype.js';
import { checkRankSources } from './server-plan.js';
import { Receiver } from './server-receiver.js';
import { checkVerify, probeBatch, trainerLogprobs, worstDiff, type ResolvedVerify } from './verify.js';
import { checkBaseFingerprints, checkFingerprints } from './fingerprint-check.js';
import { syncFault } from './faults.js';
import { settle } from './settle.js';
import { InFlight } from './in-flight.js';
import { enqueueGather } from './server-gather.js';
import { buildProgram, pieceKey, type SyncProgram } from './server-program.js';
import { profiler } from '../runtime/profiler.js';

export interface ServerSyncOptions {
  comm: Communicator;
  role: 'trainer' | 'engine';
  trainerRanks: number;
  cfg: ModelConfig;
  strategy?: TrainStrategy;
  engine?: RolloutEngine;
  bucketBytes?: number;
  /**
   * Segments of at most this many bytes are packed per bucket into one staging buffer and
   * sent with one broadcast (buckets.ts packSmall); larger ones are broadcast in place.
   * 0 packs nothing. Default 1 MiB (DEFAULT_COALESCE_BYTES).
   */
  coalesceBytes?: number;
  /** Deadline of each host wait of the sync, ms (default 300000). */
  timeoutMs?: number;
}

const WAIT = { timeoutMs: 300_000 };

/**
 * 1 MiB: below it a broadcast's cost is its rendezvous (every engine rank and the root meet),
 * not its bytes, so packing (one device copy per segment) is cheaper than a collective each.
 */
export const DEFAULT_COALESCE_BYTES = 1 << 20;

function checkCoalesceBytes(v: unknown): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
    throw new InvalidArgumentError(
      `ServerSync.create(): coalesceBytes must be a non-negative integer but is ${String(v)}. HINT: segments of at most that many bytes are packed into one broadcast per bucket; pass 0 to send every segment alone, or omit it for the default (${DEFAULT_COALESCE_BYTES}).`,
      { argument: 'coalesceBytes' },
    );
  }
  return v;
}

/** A segment's part of a (wire-dtype) source piece. */
const piece = (src: Tensor, seg: Segment) => viewOf(src, [seg.bytes / dtypeSize(src.dtype)], seg.tensorOffset / dtypeSize(src.dtype));

/** Segment `seg` in a slot or staging buffer (fp32 words, 64-byte aligned offsets), seen in its wire dtype. */
function inWords(buf: Tensor, wordOffset: number, seg: Segment, wire: DType): Tensor {
  return new Tensor(buf.device, buf.buffer, wire, [seg.bytes / dtypeSize(wire)], undefined, buf.byteOffset + wordOffset * 4);
}

/** The engine precision every engine rank sent (JSON { engineDtype }); they must agree. */
function agreedEngineDtype(sent: string[]): EngineDtype {
  const got = new Set(
    sent.map((j) => {
      try {
        return checkEngineDtype((JSON.parse(j) as { engineDtype?: unknown }).engineDtype, 'engineDtype');
      } catch {
        return 'float32';
      }
    }),
  );
  if (got.size !== 1)
    throw new WeightSyncError(
      `ServerSync: the engine ranks hold weights in different precisions (${[...got].join(', ')}). HINT: start every engine replica with the same dtype.`,
      {},
    );
  return [...got][0]!;
}

export class ServerSync {
  /** Times this side finished a reload session, i.e. ran the post-load processing (engine ranks: once per full sync). */
  processCount = 0;
  /** Broadcasts this rank took part in during its last full sync (as root or receiver). */
  lastBroadcasts = 0;
  /** Gathered rounds (one allToAllV over every rank each; server-gather.ts) of its last full sync. */
  lastGathers = 0;
  readonly stream: Stream;

  private constructor(
    readonly comm: Communicator,
    readonly role: 'trainer' | 'engine',
    readonly trainerRanks: number,
    readonly cfg: ModelConfig,
    readonly bucketBytes: number,
    readonly coalesceBytes: number,
    readonly strategy: TrainStrategy | undefined,
    readonly engine: RolloutEngine | undefined,
  ) {
    // Engine ranks receive and load on the engine's own stream (FIFO: a slot is refilled
    // only after the loads that read it). Trainer ranks send from a stream of their own: a
    // full sync returns once its transfers are enqueued (in-flight.ts), and the default
    // stream, where the optimizer writes the weights, waits for them (an event). Not the
    // default stream itself: its thread runs the whole update, and on a machine with fewer
    // cores than threads the scheduler wakes such a thread late (a median 0.1 ms, p90 2 ms
    // from enqueue to the transfer's start, against ~0 and 1 ms for a thread that mostly sleeps).
    this.stream = engine ? engine.stream : comm.device.newStream();
    this.sent = engine ? null : comm.device.newEvent();
  }

  /**
   * One communicator per trainer rank r: r and the engine ranks (r is its rank 0), so a
   * bucket goes only to the ranks that load it, not to the other trainer ranks. Made at
   * the first sync (collective over `comm`, the same splits in the same order everywhere).
   */
  private fanout: Array<Communicator | null> | null = null;

  /** A trainer rank's transfers of its last full sync, still running after sync() returned (in-flight.ts). */
  private readonly inFlight = new InFlight();

  /** Trainer ranks: recorded after a sync's transfers; the default stream waits for it before the weights' next writes. */
  private readonly sent: Event | null;

  /**
   * Trainer ranks: resolves once the transfers of the last full sync completed (sync()
   * returns when they are enqueued); throws when one failed. Engine ranks: at once.
   */
  drain(): Promise<void> {
    return this.inFlight.drain();
  }

  /** Whether a trainer rank handed transfers of its last full sync that drain() has not seen complete. */
  get transfersInFlight(): boolean {
    return this.inFlight.pending;
  }

  /** Destroys the per-trainer-rank communicators this sync made (local; `comm` stays the caller's). */
  release(): void {
    for (const c of this.fanout ?? []) if (c && c !== this.comm) c.destroy();
    this.fanout = null;
  }

  private async fanoutComms(): Promise<Array<Communicator | null>> {
    if (this.fanout) return this.fanout;
    const { comm, trainerRanks } = this;
    const out: Array<Communicator | null> = [];
    if (trainerRanks === 1) out.push(comm);
    else for (let r = 0; r < trainerRanks; r++) out.push(await comm.split(comm.rank === r || comm.rank >= trainerRanks ? 0 : null, comm.rank));
    return (this.fanout = out);
  }

  static create(opts: ServerSyncOptions): ServerSync {
    checkOptions(opts, ['comm', 'role', 'trainerRanks', 'cfg', 'strategy', 'engine', 'bucketBytes', 'coalesceBytes', 'timeoutMs'], 'ServerSync.create()');
    const { comm, role, trainerRanks, cfg } = opts ?? ({} as ServerSyncOptions);
    if (!comm || !cfg) throw new InvalidArgumentError('ServerSync.create() requires { comm, role, trainerRanks, cfg }.', { argument: 'comm' });
    if (role !== 'trainer' && role !== 'engine')
      throw new InvalidArgumentError(`ServerSync.create(): role must be 'trainer' or 'engine' but is ${JSON.stringify(role)}.`, { argument: 'role' });
    if (!Number.isSafeInteger(trainerRanks) || trainerRanks < 1 || trainerRanks >= comm.size) {
      throw new InvalidArgumentError(
        `ServerSync.create(): trainerRanks must be an integer in [1, ${comm.size - 1}] (the communicator has ${comm.size} ranks and needs at least one engine rank) but is ${String(trainerRanks)}.`,
        { argument: 'trainerRanks' },
      );
    }
    const isTrainer = comm.rank < trainerRanks;
    if (isTrainer !== (role === 'trainer')) {
      throw new InvalidArgumentError(
        `ServerSync.create(): group rank ${comm.rank} is ${isTrainer ? 'a trainer' : 'an engine'} rank (trainer ranks are 0..${trainerRanks - 1}) but role is '${role}'.`,
        { argument: 'role' },
      );
    }
    if (role === 'trainer' && typeof opts.strategy?.weightSources !== 'function') {
      throw new InvalidArgumentError('ServerSync.create(): a trainer rank needs { strategy } (a training strategy, which publishes weightSources()).', {
        argument: 'strategy',
      });
    }
    if (role === 'engine' && !opts.engine) throw new InvalidArgumentError('ServerSync.create(): an engine rank needs { engine }.', { argument: 'engine' });
    if (opts.engine && opts.engine.device.ordinal !== comm.device.ordinal) {
      throw new InvalidArgumentError(
        `ServerSync.create(): the engine is on device ${opts.engine.device.ordinal} but the communicator on device ${comm.device.ordinal}.`,
        { argument: 'engine' },
      );
    }
    return new ServerSync(
      comm,
      role,
      trainerRanks,
      cfg,
      checkBucketBytes(opts.bucketBytes ?? DEFAULT_BUCKET_BYTES),
      checkCoalesceBytes(opts.coalesceBytes ?? DEFAULT_COALESCE_BYTES),
      opts.strategy,
      opts.engine,
    );
  }

  /** Collective over `comm`. */
  async sync(opts: SyncOptions = {}): Promise<SyncReport> {
    checkOptions(opts, ['adapterOnly', 'verify'], 'ServerSync.sync()');
    const verify = checkVerify(opts.verify);
    // The previous sync's transfers are done (and did not fail) before anything is sent again.
    await this.inFlight.drain();
    if (opts.adapterOnly) {
      const t0 = performance.now();
      const meter = new MemoryMeter(this.comm.device);
      const { bytes, tensors } = await serverAdapterSync({
        comm: this.comm,
        stream: this.stream,
        ...(this.strategy ? { strategy: this.strategy } : {}),
        ...(this.engine ? { engine: this.engine } : {}),
      });
      const report = finishReport({
        mode: 'server',
        kind: 'adapter',
        bytes,
        seconds: (performance.now() - t0) / 1000,
        peakExtraBytes: meter.peakExtra(),
        tensors,
      });
      if (verify) report.verified = await this.verify(verify, true);
      return report;
    }
    const { comm, stream } = this;
    const device = comm.device;
    // Phases as host spans in an ASCENT_PROFILE trace (nothing when not profiling): where a
    // sync's latency goes on each rank (start wait, planning, enqueueing, transfer, processing).
    let endPhase = profiler()?.begin('sync', 'weightSync.start');
    // The weights' last writes (the optimizer step on the default stream) come before any read.
    await settle(device.defaultStream, WAIT.timeoutMs);
    endPhase?.();
    endPhase = profiler()?.begin('sync', 'weightSync.plan');
    const meter = new MemoryMeter(device);
    const t0 = performance.now();
    const prog = await this.program();
    const { plans, rounds, gathers, wireOf, packs } = prog;
    const casts: Tensor[] = [];
    // Rounds whose segments are all small go as one allToAllV over `comm` (server-gather.ts);
    // the per-trainer-rank communicators are made only when some round is broadcast.
    const fanout = gathers.every((g) => g) ? null : await this.fanoutComms();
    // Engine ranks: the whole sync is one reload session, whose finish() processes it once;
    // a failure aborts it (finally), so the engine takes the next attempt.
    const session = this.role === 'engine' ? this.engine!.beginReload() : null;
    let receiver: Receiver | null = null;
    // Every transfer of this rank is enqueued: from here a failure leaves no peer waiting.
    let issued = false;
    // A trainer rank handed its transfers and the buffers they read to `inFlight`.
    let handed = false;
    try {
      const sources = this.role === 'trainer' ? this.sourceTensors(prog.wire, casts) : null;
      const fault = session ? syncFault(this.engine!, (name) => session.entry(name).writes[0], 'server') : null;
      const rx = (receiver = session ? new Receiver(this.engine!, session, prog.assemblies, stream) : null);
      // Engine ranks: where each segment is received — straight into a parameter, or into a
      // slot (two slots alternate, each as large as the most any bucket puts there, at most
      // one bucket): the bucket's packed small segments first, then the other pieces that are
      // not contiguous in a parameter; a gathered round puts every trainer rank's pack side by
      // side in one slot. Trainer ranks: a root broadcasts each large segment in place from the
      // parameter it owns (the broadcast never writes the root's buffer) and the small ones
      // packed into one staging buffer (stream order lets one buffer serve every bucket: the
      // next bucket's copies run after this bucket's collective read it).
      const routes = rx ? plans.map((pl, r) => pl.map((bk, b) => (gathers[b] ? null : rx.route(bk, packs[r]![b]!)))) : null;
      const slotElems = routes ? Math.max(16, ...routes.flat().map((x) => x?.elems ?? 0), ...gathers.map((g) => g?.elems ?? 0)) : 0;
      const slots = rx ? [0, 1].map(() => Tensor.empty(device, [slotElems], 'fp32')) : [];
      const stageElems = rx ? 0 : Math.max(0, ...packs[comm.rank]!.map((p) => p.elems));
      const staging = stageElems ? Tensor.empty(device, [stageElems], 'fp32') : null;
      // The side of a gathered round that moves nothing passes an empty view of its own buffer
      // (no memory beyond the slots and staging); a trainer rank that owns nothing, a scrap.
      const scrap = gathers.some((g) => g) && !rx && !staging ? Tensor.empty(device, [16], 'fp32') : null;
      const empty = (slots[0] ?? staging ?? scrap) && viewOf((slots[0] ?? staging ?? scrap)!, [0], 0);
      const pending: Promise<void>[] = [];
      let k = 0;
      this.lastBroadcasts = 0;
      this.lastGathers = 0;
      endPhase?.();
      endPhase = profiler()?.begin('sync', 'weightSync.issue');
      // A trainer rank's packed segments of `bucket`, copied into `buf` at their packed offsets.
      // One op for all of them: a bucket of a small model packs dozens of few-hundred-byte segments.
      const packInto = (buf: Tensor, bucket: Bucket, pack: { at: Array<number | null> }) => {
        const list = new CopyRanges();
        bucket.segments.forEach((seg, i) => {
          const at = pack.at[i];
          if (at == null) return;
          const dst = inWords(buf, at, seg, wireOf(seg));
          list.add(dst, 0, piece(sources!.get(seg.name)!, seg), 0, dst.numel);
        });
        list.enqueue(stream);
      };
      try {
        for (let b = 0; b < rounds; b++) {
          const g = gathers[b];
          if (g) {
            const slot = rx ? slots[k++ % 2]! : null;
            const mine = rx ? null : plans[comm.rank]![b];
            if (mine) packInto(staging!, mine, g.packs[comm.rank]!);
            pending.push(enqueueGather(comm, this.trainerRanks, g, (slot ?? staging ?? scrap)!, empty!, stream));
            this.lastGathers++;
            if (slot) fault?.received(slot);
            if (rx)
              rx.batch(() =>
                plans.forEach((pl, r) =>
                  pl[b]?.segments.forEach((seg, i) => {
                    const at = g.packs[r]!.at[i];
                    rx.begin(seg, inWords(slot!, at == null ? 0 : g.offsets[r]! + at, seg, wireOf(seg)), false).end();
                  }),
                ),
              );
            continue;
          }
          for (let r = 0; r < this.trainerRanks; r++) {
            const bucket: Bucket | undefined = plans[r]![b];
            if (!bucket) continue;
            const c = fanout![r];
            if (!c) continue; // another trainer rank's bucket
            // A process leader of a communicator across processes moves the data between its
            // stream ops (after the net leg): what reads or refills the buffer waits for the promise.
            const leads = c instanceof SpanningCommunicator && c.isProcessLeader;
            const slot = rx ? slots[k++ % 2]! : null;
            const route = routes?.[r]![b];
            const pack = packs[r]![b]!;
            if (pack.elems) {
              const buf = viewOf((slot ?? staging)!, [pack.elems], 0);
              if (!rx) packInto(buf, bucket, pack);
              pending.push(c.broadcast(buf, buf, 0, stream));
              this.lastBroadcasts++;
              if (leads) await pending[pending.length - 1];
              if (rx)
                rx.batch(() =>
                  bucket.segments.forEach((seg, i) => pack.at[i] != null && rx.begin(seg, inWords(buf, pack.at[i]!, seg, wireOf(seg)), false).end()),
                );
            }
            for (const [i, seg] of bucket.segments.entries()) {
              if (pack.at[i] != null) continue; // sent packed above
              const got = rx?.begin(seg, route!.direct[i] ?? inWords(slot!, route!.offsets[i]!, seg, wireOf(seg)), !!route!.direct[i]);
              if (seg.bytes) {
                const buf = got ? got.buf : piece(sources!.get(seg.name)!, seg);
                pending.push(c.broadcast(buf, buf, 0, stream));
                this.lastBroadcasts++;
                if (leads) await pending[pending.length - 1];
              }
              got?.end();
            }
          }
        }
        issued = true;
        endPhase?.();
        if (!rx && !verify) {
          // A trainer rank: the default stream's next work (the optimizer's writes to the weights)
          // waits for the transfers that read them, and fails if they did; they complete without us.
          device.defaultStream.waitEvent(this.sent!.record(stream));
          this.inFlight.hand(pending, [staging, scrap, ...casts]);
          handed = true;
        } else {
          endPhase = profiler()?.begin('sync', 'weightSync.wait');
          await Promise.all(pending);
          endPhase?.();
        }
        endPhase = profiler()?.begin('sync', 'weightSync.finish');
        for (const s of slots) s.release();
        slots.length = 0;
        if (rx && session) {
          rx.checkComplete();
          session.finish();
          this.processCount++;
          fault?.after();
          markEngineBaseWeights(this.engine!);
        }
        // Engine ranks: the post-load processing has run (its errors are this sync's; the
        // sync's stream is the engine's, so one wait serves both). Trainer ranks that waited
        // (a verified sync): every collective resolved, so the stream has usually nothing left.
        if (!handed) await settle(stream, WAIT.timeoutMs);
      } finally {
        if (!handed) {
          await Promise.allSettled(pending);
          staging?.release();
          scrap?.release();
        }
        for (const s of slots) s.release();
        rx?.release();
        fault?.restore();
      }
    } catch (e) {
      // This rank failed before taking part in every transfer: its peers wait in a collective
      // it will never join, until the exec deadline (30 min by default). Abort the sync's
      // communicator so they fail now, naming this rank and why.
      if (!issued && !comm.aborted)
        comm.abort(`ServerSync: rank ${comm.rank} failed inside the sync before its transfers were issued: ${(e as Error).message}`);
      throw e;
    } finally {
      if (session?.open) session.abort();
      if (!handed) for (const t of casts) t.release(); // the wire casts, freed once the transfers that read them are done
    }
    endPhase?.();
    const seconds = (performance.now() - t0) / 1000;
    const report = finishReport({
      mode: 'server',
      kind: 'full',
      bytes: prog.bytes,
      dtype: this.engineDtype,
      seconds,
      peakExtraBytes: meter.peakExtra(),
      tensors: receiver ? receiver.loaded : plans[comm.rank]!.reduce((a, bk) => a + bk.segments.filter((s) => s.last).length, 0),
    });
    if (verify) report.verified = await this.verify(verify, false);
    return report;
  }

  /** The trainer ranks' sources, exchanged at the first full sync (a strategy's placements do not change). */
  private ranks: RankSources[] | null = null;

  /**
   * The plan of a full sync (server-program.ts): built at the first and reused, as it depends only on the
   * sources and the engine precision, which that sync's exchange fixes.
   */
  private prog: SyncProgram | null = null;

  /** Collective at the first full sync (the sources' exchange); local after. */
  private async program(): Promise<SyncProgram> {
    const ranks = await this.exchangeSources();
    return (this.prog ??= buildProgram({
      ranks,
      engineDtype: this.engineDtype,
      cfg: this.cfg,
      bucketBytes: this.bucketBytes,
      coalesceBytes: this.coalesceBytes,
      gather: !(this.comm instanceof SpanningCommunicator),
      trainerRank: this.role === 'trainer' ? this.comm.rank : null,
    }));
  }

  /**
   * Every trainer rank's weight-source descriptors (plain JSON, no tensors), all-gathered to
   * every rank: the lengths, then the JSON bytes packed in int32 words, in rounds of at most
   * half a bucket over all ranks (the exchange stays within the sync's memory budget).
   * Engine ranks send none.
   */
  private async exchangeSources(): Promise<RankSources[]> {
    if (this.ranks) return this.ranks;
    const { comm, stream } = this;
    const s = this.strategy;
    const mine: RankSources | null = s ? { layout: s.layout, sources: s.weightSources().map(describeSource) } : null;
    // Engine ranks send their weight precision: what the trainers cast the weights to before sending (wire.ts).
    const bytes = new TextEncoder().encode(JSON.stringify(mine ?? { engineDtype: this.engine!.dtype }));
    const words = new Int32Array(Math.ceil(bytes.length / 4));
    new Uint8Array(words.buffer).set(bytes);
    const owned: Tensor[] = [];
    const make = (t: Tensor) => (owned.push(t), t);
    try {
      const len = make(Tensor.fromArray(comm.device, Int32Array.from([bytes.length]), [1], { stream }));
      const lens = make(Tensor.empty(comm.device, [comm.size], 'int32'));
      await comm.allGather(len, lens, stream);
      const all = (await lens.toArray({ stream, timeoutMs: WAIT.timeoutMs })) as Int32Array;
      const total = Math.ceil(Math.max(...all) / 4);
      const per = Math.max(16, Math.min(total, Math.floor(this.bucketBytes / 8 / comm.size)));
      const got = Array.from({ length: comm.size }, () => new Int32Array(Math.max(1, total)));
      const recv = make(Tensor.empty(comm.device, [per * comm.size], 'int32'));
      for (let at = 0; at < total; at += per) {
        const chunk = new Int32Array(per);
        chunk.set(words.subarray(at, at + per));
        const send = Tensor.fromArray(comm.device, chunk, [per], { stream });
        let r: Int32Array;
        try {
          await comm.allGather(send, recv, stream);
          r = (await recv.toArray({ stream, timeoutMs: WAIT.timeoutMs })) as Int32Array;
        } finally {
          send.release();
        }
        got.forEach((g, q) => g.set(r.subarray(q * per, q * per + Math.min(per, total - at)), at));
      }
      const json = Array.from({ length: this.trainerRanks }, (_, r) => {
        try {
          return JSON.parse(new TextDecoder().decode(new Uint8Array(got[r]!.buffer, 0, all[r]!))) as unknown;
        } catch {
          return null;
        }
      });
      this.engineDtype = agreedEngineDtype(
        got.slice(this.trainerRanks).map((g, q) => new TextDecoder().decode(new Uint8Array(g.buffer, 0, all[this.trainerRanks + q]!))),
      );
      return (this.ranks = checkRankSources(json, this.trainerRanks));
    } finally {
      for (const t of owned) t.release();
    }
  }

  /** The engine ranks' weight precision (exchanged with the sources at the first full sync). */
  private engineDtype: EngineDtype = 'float32';

  /**
   * This trainer rank's piece tensors by key, in the dtype each travels as: the local views
   * of the sources it owns, or their casts to bf16 (made here, pushed to `casts`, released
   * when the sync ends: half the owned fp32 bytes of extra memory while it runs).
   */
  private sourceTensors(wire: (d: SourceDescriptor) => DType, casts: Tensor[]): Map<string, Tensor> {
    return new Map(
      this.strategy!.weightSources()
        .filter((x) => x.owner)
        .map((x) => {
          const t = onWire(x.local, wire(x), this.stream);
          if (t !== x.local) casts.push(t);
          return [pieceKey(x.key, x.part), t];
        }),
    );
  }

  /** Collective over `comm`: fingerprints (full syncs), then the probe; every engine rank's verdict is gathered. */
  private async verify(v: ResolvedVerify, adapter: boolean): Promise<Verified> {
    const t0 = performance.now();
    const { comm, stream } = this;
    const out: Verified = { checksums: false, fingerprints: 0, fingerprintSeconds: 0, seconds: 0 };
    const side = { cfg: this.cfg, comm, stream, ...(this.engine ? { engine: this.engine } : {}), timeoutMs: WAIT.timeoutMs };
    const f = adapter
      ? await checkBaseFingerprints(side, this.engine ? engineBaseCopies(this.engine) : null)
      : await checkFingerprints({ ...side, ...(this.strategy ? { sources: this.strategy.weightSources() } : {}) });
    if (f) Object.assign(out, { checksums: true, fingerprints: f.compared, fingerprintSeconds: f.seconds });
    // Per rank: [engine, worst diff, row, position, bad state]; trainers send zeros.
    const mine = new Float32Array(5);
    let badState: string | null = null;
    const probe = v.probe;
    let sum: Float32Array | null = null;
    if (probe) {
      const batch = probeBatch(probe.ids);
      const B = batch.batch,
        S = batch.seqLen;
      const buf = new Float32Array(B * S + B);
      if (this.role === 'trainer') {
        const lp = await trainerLogprobs(this.strategy!, batch, probe.temperature);
        for (let b = 0; b < B; b++) {
          if (!lp.rows[b]) continue;
          buf[B * S + b] = 1;
          for (let t = 0; t < S; t++) buf[b * S + t] = lp.values[b * S + t]!;
        }
      }
      const t = Tensor.fromArray(comm.device, buf, [buf.length], { stream });
      try {
        await comm.allReduce(t, t, 'sum', stream);
        sum = (await t.toArray({ stream, timeoutMs: WAIT.timeoutMs })) as Float32Array;
      } finally {
        t.release();
      }
    }
    if (this.engine) {
      mine[0] = 1;
      badState = [...this.engine.params.params.values()].find((p) => p.state !== 'processed' || !p.tensor)?.name ?? null;
      mine[4] = badState ? 1 : 0;
      if (probe && sum && !badState) {
        const B = probe.ids.length,
          S = Math.max(...probe.ids.map((r) => r.length));
        const values = new Float32Array(B * S);
        for (let b = 0; b < B; b++) for (let x = 0; x < S; x++) values[b * S + x] = sum[b * S + x]! / Math.max(1, sum[B * S + b]!);
        const rows = Array.from({ length: B }, (_, b) => (sum![B * S + b]! > 0 ? 1 : 0));
        const eng = await this.engine.computeLogprobs(probe.ids, { temperature: probe.temperature });
        const w = worstDiff(probe.ids, S, values, rows, eng);
        mine.set([w.diff, w.row, w.pos], 1);
      }
    }
    const send = Tensor.fromArray(comm.device, mine, [5], { stream });
    const recv = Tensor.empty(comm.device, [5 * comm.size], 'fp32');
    let all: Float32Array;
    try {
      await comm.allGather(send, recv, stream);
      all = (await recv.toArray({ stream, timeoutMs: WAIT.timeoutMs })) as Float32Array;
    } finally {
      send.release();
      recv.release();
    }
    const bad: string[] = [];
    let worst = { diff: 0, row: -1, pos: -1, rank: -1 };
    for (let r = 0; r < comm.size; r++) {
      const [isEngine, diff, row, pos, state] = all.subarray(5 * r, 5 * r + 5);
      if (!isEngine) continue;
      if (state) bad.push(`engine rank ${r}${r === comm.rank && badState ? ` (runtime parameter ${badState})` : ''}`);
      if (!(diff! <= worst.diff)) worst = { diff: Number.isNaN(diff!) ? Infinity : diff!, row: row!, pos: pos!, rank: r };
    }
    if (bad.length) {
      throw new WeightSyncError(
        `Weight sync verification: a runtime parameter is not 'processed' after the sync on ${bad.join(', ')}. HINT: the sync did not write it (a missing source tensor) or left a reload unprocessed.`,
        { engineRanks: bad, parameter: badState },
      );
    }
    if (probe) {
      if (!(worst.diff <= v.tolerance)) {
        throw new WeightSyncError(
          `Weight sync verification failed: trainer and engine log-probs of the probe differ by ${worst.diff.toExponential(3)} (tolerance ${v.tolerance}) on engine rank ${worst.rank} at row ${worst.row}, position ${worst.pos} (token ${probe.ids[worst.row]?.[worst.pos + 1]}). HINT: a runtime weight of that engine is in the wrong layout or was not written; run the sync with verify to compare fingerprints.`,
          { maxLogprobDiff: worst.diff, engineRank: worst.rank, row: worst.row, position: worst.pos, tolerance: v.tolerance },
        );
      }
      out.maxLogprobDiff = worst.diff;
    }
    out.seconds = (performance.now() - t0) / 1000;
    return out;
  }
}
