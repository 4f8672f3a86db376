/**
 * ColocateSync: trainer and rollout engine on the same ranks (the strategy's ranks are
 * the engine world). A full sync turns what each rank's strategy owns into the engine's
 * processed runtime layout on the device (plan.ts plans the strategy's weight sources ×
 * the engine's weight slots, colocate-sources.ts runs the steps) — one direct session of
 * the engine: no loader, no post-load processing — on the engine's stream, after the
 * trainer's stream (event). A failed sync aborts the session (the engine stays usable).
 * An adapter sync sends only the adapters, read from the strategy's adapter sources
 * (parallel/adapter-sources.ts) and applied by rollout/lora.ts.
 * A 'bfloat16' engine gets its matmul weights cast to bf16 before the all-gathers (wire.ts):
 * the report's bytes are what moved, half the fp32 size for those weights.
 * The extra device memory of a sync is measured (device peak minus what was allocated
 * before) and reported; verification is optional (verify.ts): exact fingerprints after a
 * full sync (fingerprint-check.ts), the probe's log-prob parity when a probe is given.
 */
import { Tensor } from '../runtime/device/device-index.js';
import { InvalidArgumentError, WeightSyncError, InvalidStateError } from '../runtime/errors.js';
import { checkOptions } from '../runtime/device/device.js';
import type { RolloutEngine } from '../rollout/engine.js';
import type { SlotDescriptor } from '../rollout/weight-slots.js';
import { applyEngineAdapters, engineBaseCopies, markEngineBaseWeights } from '../rollout/lora.js';
import type { TrainStrategy } from '../train/strategy.js';
import { syncSources, type ColocateOut } from './colocate-sources.js';
import { checkBucketBytes, DEFAULT_BUCKET_BYTES, finishReport, MemoryMeter, type SyncOptions, type SyncReport, type Verified } from './report.js';
import { wireBytes } from './wire.js';
import { checkVerify, logprobError, probeBatch, trainerLogprobs, worstDiff, type ResolvedVerify } from './verify.js';
import { checkBaseFingerprints, checkFingerprints } from './fingerprint-check.js';
import { syncFault } from './faults.js';

export class ColocateSync {
  readonly strategy: TrainStrategy;
  readonly engine: RolloutEngine;
  readonly bucketBytes: number;
  /** All-gathers the last full sync issued (adjacent small tensors share one: colocate-sources.ts). */
  lastGathers = 0;

  constructor(opts: { strategy: TrainStrategy; engine: RolloutEngine; bucketBytes?: number }) {
    checkOptions(opts, ['strategy', 'engine', 'bucketBytes'], 'new ColocateSync()');
    if (!opts?.strategy || !opts.engine) throw new InvalidArgumentError('new ColocateSync() requires { strategy, engine }.', { argument: 'strategy' });
    this.strategy = opts.strategy;
    this.engine = opts.engine;
    this.bucketBytes = checkBucketBytes(opts.bucketBytes ?? DEFAULT_BUCKET_BYTES);
    if (opts.engine.cfg !== opts.strategy.cfg && JSON.stringify(opts.engine.cfg) !== JSON.stringify(opts.strategy.cfg)) {
      throw new InvalidArgumentError('new ColocateSync(): the strategy and the engine have different model configs.', { argument: 'engine' });
    }
  }

  /** Collective over the strategy's ranks. */
  async sync(opts: SyncOptions = {}): Promise<SyncReport> {
    checkOptions(opts, ['adapterOnly', 'verify'], 'ColocateSync.sync()');
    const verify = checkVerify(opts.verify);
    const { engine, strategy } = this;
    const device = engine.device;
    const stream = engine.stream;
    await device.defaultStream.synchronize({ timeoutMs: 300_000 }); // trainer updates are done before the meter starts
    const meter = new MemoryMeter(device);
    const t0 = performance.now();
    let bytes = 0,
      tensors = 0;
    const kind = opts.adapterOnly ? 'adapter' : 'full';
    if (opts.adapterOnly) {
      const adapters = strategy.adapterSources();
      if (!adapters) {
        throw new InvalidArgumentError(
          `ColocateSync.sync({ adapterOnly: true }): the ${strategy.kind} strategy has no LoRA adapters. HINT: create the strategy with { lora }, or run a full sync.`,
          { strategy: strategy.kind },
        );
      }
      if (adapters.merged)
        throw new InvalidStateError(
          'ColocateSync.sync({ adapterOnly: true }): the adapters are merged into the base weights; a merged sync is a full sync. HINT: sync() without adapterOnly.',
        );
      // Full adapters by PEFT name (collective for the sharded strategies; small next to the model).
      const host = await adapters.gather();
      const up = (name: string) => {
        const h = host.get(name);
        if (!h) throw new InvalidArgumentError(`ColocateSync: the strategy's gathered adapters have no ${name}.`, { tensor: name });
        return Tensor.fromArray(device, h.data, h.shape, { stream });
      };
      const list = adapters.targets.map((t) => ({ base: t.base, a: up(t.a), b: up(t.b) }));
      try {
        applyEngineAdapters(engine, list, adapters.scaling);
        await stream.synchronize({ timeoutMs: 300_000 });
      } finally {
        for (const x of list) {
          x.a.release();
          x.b.release();
        }
      }
      for (const x of list) bytes += x.a.nbytes + x.b.nbytes;
      tensors = list.length * 2;
    } else {
      // The whole sync is one direct session; a failure aborts it, so the engine takes the next attempt.
      const session = engine.beginDirect();
      try {
        let mine: SlotDescriptor[] | null = null;
        const slots = () => (mine ??= engine.weightSlots());
        const fault = syncFault(engine, (name) => slots().find((x) => x.hf === name)?.region, 'colocate');
        const out: ColocateOut = {
          engine,
          session,
          stream,
          bucketBytes: this.bucketBytes,
          pending: [],
          slots,
          owner: strategy,
          ...(fault ? { skips: (hf: string) => fault.skips(hf), freshPlan: true } : {}),
        };
        try {
          tensors = syncSources(strategy.weightSources(), out);
        } finally {
          await Promise.allSettled(out.pending);
          fault?.restore();
        }
        await Promise.all(out.pending);
        this.lastGathers = out.pending.length;
        fault?.after();
        session.finish();
      } finally {
        if (session.open) session.abort();
      }
      markEngineBaseWeights(engine);
      bytes = wireBytes(engine.cfg, engine.dtype);
    }
    await stream.synchronize({ timeoutMs: 300_000 });
    const seconds = (performance.now() - t0) / 1000;
    const peakExtraBytes = meter.peakExtra();
    const report = finishReport({ mode: 'colocate', kind, bytes, seconds, peakExtraBytes, tensors, dtype: engine.dtype });
    if (verify) report.verified = await this.verify(verify, kind === 'adapter');
    return report;
  }

  /** Collective over the strategy's ranks: every rank returns (or throws) the same verdict. */
  private async verify(v: ResolvedVerify, adapter: boolean): Promise<Verified> {
    const t0 = performance.now();
    const { engine, strategy } = this;
    const comm = strategy.communicators?.[0] ?? null;
    const out: Verified = { checksums: false, fingerprints: 0, fingerprintSeconds: 0, seconds: 0 };
    const f = adapter
      ? await checkBaseFingerprints({ cfg: engine.cfg, comm, stream: engine.stream, engine, timeoutMs: 300_000 }, engineBaseCopies(engine))
      : await checkFingerprints({
          cfg: engine.cfg,
          comm,
          stream: engine.stream,
          sources: strategy.weightSources(),
          engine,
          engineTp: engine.shard.tpSize,
          engineDtype: engine.dtype,
          timeoutMs: 300_000,
        });
    if (f) Object.assign(out, { checksums: true, fingerprints: f.compared, fingerprintSeconds: f.seconds });
    // An adapter sync: every parameter still 'processed' (agreed over the ranks below).
    const badState = [...engine.params.params.values()].find((p) => p.state !== 'processed' || !p.tensor)?.name ?? null;
    let w = { diff: 0, row: -1, pos: -1 };
    if (v.probe) {
      const batch = probeBatch(v.probe.ids);
      const mine = await trainerLogprobs(strategy, batch, v.probe.temperature);
      const eng = badState ? null : await engine.computeLogprobs(v.probe.ids, { temperature: v.probe.temperature });
      if (eng) w = worstDiff(v.probe.ids, batch.seqLen, mine.values, mine.rows, eng);
    }
    let global = [w.diff, badState ? 1 : 0];
    if (comm && comm.size > 1) {
      const st = comm.device.defaultStream;
      const t = Tensor.fromArray(comm.device, Float32Array.from(global), [2], { stream: st });
      try {
        await comm.allReduce(t, t, 'max', st);
        global = [...((await t.toArray({ stream: st, timeoutMs: 300_000 })) as Float32Array)];
      } finally {
        t.release();
      }
    }
    if (global[1]) {
      throw new WeightSyncError(
        `Weight sync verification: ${badState ? `runtime parameter ${badState}` : 'a runtime parameter on another rank'} is not 'processed' after the sync. HINT: the sync did not write it, or the engine is asleep (wake() before syncing).`,
        { parameter: badState },
      );
    }
    if (v.probe) {
      if (!(global[0]! <= v.tolerance)) throw logprobError(w.diff === global[0] ? w : { diff: global[0]!, row: w.row, pos: w.pos }, v.tolerance, v.probe.ids);
      out.maxLogprobDiff = global[0]!;
    }
    out.seconds = (performance.now() - t0) / 1000;
    return out;
  }
}
