/**
 * The checksum half of weight-sync verification: the trainer side and every engine rank
 * compute exact fingerprints (fingerprint.ts) of the canonical regions (regions.ts), and
 * every engine rank compares its own with the trainers' sum. Collective over `comm`
 * (trainer and engine ranks; colocated, every rank is both):
 *   1. (server) the engine TP size, agreed by an all-reduce;
 *   2. trainers enqueue the fingerprint of what they own of every region (their pieces,
 *      filtered to the region), all-reduced (sum mod 2^64) to every rank;
 *   3. each engine rank fingerprints the region of every tensor it holds (the sum over its
 *      slots of the tensor), from its runtime parameters in the processed layout, and compares;
 *   4. the verdicts of all ranks are all-gathered, so every rank returns or throws the
 *      same WeightSyncError, naming each engine rank that differs, the tensor and both
 *      fingerprints.
 * A 'bfloat16' engine (rollout/weight-dtype.ts) holds its matmul weights in bf16, and what
 * it should hold is the bf16 cast of the trainer's fp32 weight: the trainers fingerprint
 * their pieces of those tensors rounded to bf16 (and widened back, exactly, since the
 * kernel reads fp32), the engine its bf16 parameters widened. The comparison stays exact:
 * a wrong layout or one changed bf16 value still changes the fingerprint. (Server mode: the
 * engine precision is agreed with the TP size.)
 */
import { cast, Tensor, type Stream } from '../runtime/device/device-index.js';
import type { DType } from '../runtime/device/dtype.js';
import type { Communicator } from '../runtime/comm/comm.js';
import { WeightSyncError } from '../runtime/errors.js';
import type { ModelConfig } from '../model/config.js';
import type { RolloutEngine } from '../rollout/engine.js';
import { slotsByHf, type SlotDescriptor } from '../rollout/weight-slots.js';
import { ENGINE_DTYPES, hfDtypeOf, type EngineDtype } from '../rollout/weight-dtype.js';
import type { WeightSource } from '../parallel/weight-sources.js';
import { enqueueFingerprint, hex } from './fingerprint.js';
import { engineView, regionTable } from './regions.js';
import { trainerPieces } from './trainer-pieces.js';

export interface FingerprintCheck {
  cfg: ModelConfig;
  /** Spans every trainer and engine rank (null: one rank that is both). */
  comm: Communicator | null;
  stream: Stream;
  /** The trainer side: this rank's weight sources (absent on engine-only ranks). */
  sources?: readonly WeightSource[];
  engine?: RolloutEngine;
  /** The engine TP size when every rank knows it (colocated); else agreed over comm. */
  engineTp?: number;
  /** The engine's weight precision when every rank knows it (colocated; with engineTp); else agreed over comm with the TP size. */
  engineDtype?: EngineDtype;
  timeoutMs: number;
}

export interface FingerprintSummary {
  /** Canonical regions compared, over all engine ranks. */
  compared: number;
  seconds: number;
}

/**
 * Enqueues out[i] += the fingerprint of what the engine holds of HF tensor `hf`: the sum over
 * its slots of it (disjoint regions; several for a GDN in_proj_qkv / conv1d above tp 1),
 * read from `src(param)` (the parameter's tensor, or a copy of it) in the processed layout.
 */
function fingerprintHeld(
  slots: readonly SlotDescriptor[],
  engine: RolloutEngine,
  src: (param: string) => Tensor,
  out: Tensor,
  i: number,
  stream: Stream,
): void {
  for (const slot of slots) {
    const { param, view } = engineView(slot, engine.params, true);
    const t = src(param.name);
    // A bf16 parameter is read widened to fp32 (exact; the fingerprint kernel reads fp32 bits).
    const wide = t.dtype === 'fp32' ? t : cast(t, 'fp32', { stream });
    enqueueFingerprint(wide.reshape([wide.numel]), view, out, i, stream);
    if (wide !== t) wide.release(); // freed once the fingerprint that reads it has run
  }
}

/** `src` as the engine should hold it, widened to fp32: itself, or its bf16 rounding (a temporary the caller releases). */
function asHeld(src: Tensor, dtype: DType, stream: Stream): Tensor {
  if (dtype === 'fp32') return src;
  const low = cast(src, dtype, { stream });
  try {
    return cast(low, 'fp32', { stream });
  } finally {
    low.release(); // freed once the cast that reads it has run
  }
}

/** Per-rank verdict: [engine, tpRank, code (0 ok, 1 mismatch, 2 layout), index, engine fp, trainer fp, mismatches]. */
const REC = 7;

/** Fingerprints of each engine's tensors at its last verified full sync (the base of later adapter syncs). */
const recorded = new WeakMap<RolloutEngine, BigInt64Array>();

export async function checkFingerprints(x: FingerprintCheck): Promise<FingerprintSummary> {
  const t0 = performance.now();
  const { cfg, comm, stream, engine, sources } = x;
  const device = (engine?.device ?? comm?.device)!;
  const multi = !!comm && comm.size > 1;
  const wait = { stream, timeoutMs: x.timeoutMs };
  const owned: Tensor[] = [];
  const make = (t: Tensor) => (owned.push(t), t);
  try {
    let tp = x.engineTp ?? engine?.shard.tpSize ?? 0;
    let dtype: EngineDtype = x.engineDtype ?? engine?.dtype ?? 'float32';
    if (x.engineTp === undefined && multi) {
      // [tp, -tp, precision, -precision] maxed over the ranks (trainer-only ranks send the identity): max and min of each over the engines.
      const code = ENGINE_DTYPES.indexOf(dtype);
      const t = make(Tensor.fromArray(device, Int32Array.from(engine ? [tp, -tp, code, -code] : [0, -(2 ** 30), 0, -(2 ** 30)]), [4], { stream }));
      await comm!.allReduce(t, t, 'max', stream);
      const [hi, lo, dhi, dlo] = (await t.toArray(wait)) as Int32Array;
      if (hi !== -lo!)
        throw new WeightSyncError(
          `Weight sync verification: the engine ranks run different TP sizes (${-lo!} to ${hi}); every replica must use the same. HINT: start every engine replica with the same tp.`,
          { minTp: -lo!, maxTp: hi },
        );
      if (dhi !== -dlo!)
        throw new WeightSyncError(
          'Weight sync verification: the engine ranks hold weights in different precisions (float32 and bfloat16). HINT: start every engine replica with the same dtype.',
          {},
        );
      tp = hi!;
      dtype = ENGINE_DTYPES[dhi!]!;
    }
    const table = regionTable(cfg, tp);
    const byTensor = table.tensors.map(() => [] as number[]);
    table.regions.forEach((r, i) => byTensor[r.tensor]!.push(i));
    const index = new Map(table.tensors.map((t, i) => [t.name, i]));
    const trainer = make(Tensor.zeros(device, [Math.max(1, table.regions.length)], 'int64', { stream }));
    if (sources) {
      // A source's pieces (q / k / v of one Megatron qkv, gate / up) share its tensor: one rounding each, freed once read.
      let src: Tensor | null = null,
        held: Tensor | null = null;
      const drop = () => {
        if (held && held !== src) held.release(); // freed once the fingerprints that read it have run
      };
      try {
        for (const p of trainerPieces(sources)) {
          const ti = index.get(p.tensor);
          if (ti === undefined)
            throw new WeightSyncError(`Weight sync verification: the trainer holds ${p.tensor}, which is not a tensor of the model config.`, {
              tensor: p.tensor,
            });
          if (src !== p.src) {
            drop();
            src = p.src;
            held = asHeld(p.src, hfDtypeOf(cfg, p.tensor, dtype), stream);
          }
          for (const ri of byTensor[ti]!) for (const filter of table.regions[ri]!.filters) enqueueFingerprint(held!, p.view, trainer, ri, stream, { filter });
        }
      } finally {
        drop();
      }
    }
    if (multi) await comm!.allReduce(trainer, trainer, 'sum', stream);
    const rec = new BigInt64Array(REC);
    let passed: BigInt64Array | null = null;
    if (engine) {
      const k = engine.shard.tpRank;
      rec[0] = 1n;
      rec[1] = BigInt(k);
      const names = [...engine.params.params.keys()];
      const bad = names.findIndex((n) => {
        const p = engine.params.params.get(n)!;
        return p.state !== 'processed' || !p.tensor;
      });
      if (bad >= 0) {
        rec[2] = 2n;
        rec[3] = BigInt(bad);
      } else {
        const mine = make(Tensor.zeros(device, [table.tensors.length], 'int64', { stream }));
        const slots = slotsByHf(engine.weightSlots());
        table.tensors.forEach((t, i) => fingerprintHeld(slots.get(t.name)!, engine, (n) => engine.params.get(n).tensor!, mine, i, stream));
        const [got, want] = (await Promise.all([mine.toArray(wait), trainer.toArray(wait)])) as [BigInt64Array, BigInt64Array];
        let n = 0;
        passed = got.slice();
        table.tensors.forEach((_, i) => {
          const w = want[table.slot[k]![i]!]!;
          if (got[i] === w) return;
          if (n++ === 0) rec.set([1n, BigInt(i), got[i]!, w], 2);
        });
        rec[6] = BigInt(n);
      }
    }
    const engines = await gatherVerdicts(
      comm,
      rec,
      stream,
      x.timeoutMs,
      table.tensors.map((t) => t.name),
      engine,
      make,
      "the trainer's",
    );
    if (engine && passed) recorded.set(engine, passed);
    return { compared: engines * table.tensors.length, seconds: (performance.now() - t0) / 1000 };
  } finally {
    for (const t of owned) t.release();
  }
}

/** All-gathers every rank's verdict record; throws the same WeightSyncError everywhere when an engine rank failed. Returns the engine ranks counted. */
async function gatherVerdicts(
  comm: Communicator | null,
  rec: BigInt64Array,
  stream: Stream,
  timeoutMs: number,
  names: string[],
  engine: RolloutEngine | undefined,
  make: (t: Tensor) => Tensor,
  reference: string,
): Promise<number> {
  const multi = !!comm && comm.size > 1;
  const device = (engine?.device ?? comm?.device)!;
  let all: BigInt64Array<ArrayBufferLike> = rec;
  if (multi) {
    const send = make(Tensor.fromArray(device, rec, [REC], { stream }));
    const recv = make(Tensor.empty(device, [REC * comm!.size], 'int64'));
    await comm!.allGather(send, recv, stream);
    all = (await recv.toArray({ stream, timeoutMs })) as BigInt64Array;
  }
  const failures: string[] = [];
  let first: Record<string, unknown> | null = null;
  let engines = 0;
  for (let r = 0; r < all.length / REC; r++) {
    const v = all.subarray(r * REC, (r + 1) * REC);
    if (v[0] !== 1n) continue;
    engines++;
    const code = Number(v[2]),
      i = Number(v[3]),
      k = Number(v[1]);
    if (code === 0) continue;
    const rankName = multi ? `engine rank ${r} (tp rank ${k})` : `the engine (tp rank ${k})`;
    if (code === 2) {
      const param = engine ? [...engine.params.params.keys()][i] : `runtime parameter #${i}`;
      failures.push(`${rankName}: runtime parameter ${param} is not 'processed' after the sync`);
      first ??= { engineRank: r, tpRank: k, parameter: param };
      continue;
    }
    const tensor = names[i]!,
      more = Number(v[6]) - 1;
    failures.push(
      `${rankName} holds ${tensor} with fingerprint ${hex(v[4]!)} but ${reference} is ${hex(v[5]!)}${more > 0 ? ` (and ${more} more tensor${more > 1 ? 's' : ''} differ there)` : ''}`,
    );
    first ??= { tensor, engineRank: r, tpRank: k, engineFingerprint: hex(v[4]!), trainerFingerprint: hex(v[5]!) };
  }
  if (failures.length) {
    throw new WeightSyncError(
      `Weight sync verification failed: ${failures.join('; ')}. HINT: the sync wrote that tensor in the wrong layout, slice or values (e.g. a transposed expert weight, a wrong TP slice, a skipped tensor); compare the engine with a full reload from strategy.gatherState('params').`,
      { ...first, failures },
    );
  }
  return engines;
}

/**
 * After a LoRA adapter sync (whose adapted weights base + scaling·B·A are computed on the
 * engine, so they have no exact trainer-side counterpart; the probe checks them): every
 * engine rank's tensors that no adapter touches, and the base copies of those it does,
 * still have the fingerprints of the last verified full sync (the trainer's base weights
 * are frozen under LoRA). Collective over `comm`. Returns null when this engine has no
 * verified full sync to compare with (agreed over the ranks: then nothing is compared).
 */
export async function checkBaseFingerprints(
  x: Omit<FingerprintCheck, 'sources' | 'engineTp'>,
  base: ReadonlyMap<string, Tensor> | null,
): Promise<FingerprintSummary | null> {
  const t0 = performance.now();
  const { cfg, comm, stream, engine } = x;
  const owned: Tensor[] = [];
  const make = (t: Tensor) => (owned.push(t), t);
  try {
    const names = regionTable(cfg, 1).tensors.map((t) => t.name);
    const want = engine ? recorded.get(engine) : undefined;
    // Ranks agree whether every engine has a record: [engine without one].
    let missing = engine && !want ? 1 : 0;
    if (comm && comm.size > 1) {
      const t = make(Tensor.fromArray(comm.device, Int32Array.from([missing]), [1], { stream }));
      await comm.allReduce(t, t, 'max', stream);
      missing = ((await t.toArray({ stream, timeoutMs: x.timeoutMs })) as Int32Array)[0]!;
    }
    if (missing) return null;
    const rec = new BigInt64Array(REC);
    if (engine) {
      rec[0] = 1n;
      rec[1] = BigInt(engine.shard.tpRank);
      const mine = make(Tensor.zeros(engine.device, [names.length], 'int64', { stream }));
      const slots = slotsByHf(engine.weightSlots());
      names.forEach((name, i) => fingerprintHeld(slots.get(name)!, engine, (n) => base?.get(n) ?? engine.params.get(n).tensor!, mine, i, stream));
      const got = (await mine.toArray({ stream, timeoutMs: x.timeoutMs })) as BigInt64Array;
      let n = 0;
      names.forEach((_, i) => {
        if (got[i] === want![i]) return;
        if (n++ === 0) rec.set([1n, BigInt(i), got[i]!, want![i]!], 2);
      });
      rec[6] = BigInt(n);
    }
    const engines = await gatherVerdicts(comm, rec, stream, x.timeoutMs, names, engine, make, 'its base weights at the last full sync had');
    return { compared: engines * names.length, seconds: (performance.now() - t0) / 1000 };
  } finally {
    for (const t of owned) t.release();
  }
}
