/**
 * One all-gather for every unit of a step and one reduce-scatter for every gradient, for small
 * models in one process that keep every unit gathered from forward to backward (reshardPolicy).
 *
 * Why: each collective is a meeting point of every rank. With more ranks than cores, the ranks
 * reach it one after another and the op ends only once the last one has arrived and the movers
 * have run: per-unit collectives (a tiny model's units are a few hundred KB) cost a meeting each
 * and move little. A unit kept gathered for the whole step gains nothing from being gathered
 * right before its block, nor its gradients from leaving before the embedding's backward ends
 * (one stream runs every op in order either way), so the step gathers everything once up front
 * and reduce-scatters everything once after backward.
 *
 * Bucket layout (rank-major, as each collective wants it): rank r's part holds the units' shards
 * one after another, unit u at `r * T + base_u` (T: the units' total shard size). Results are
 * bitwise those of the per-unit collectives: an all-gather moves the same bytes, and a
 * reduce-scatter sums each element over the ranks in rank order whatever range it covers.
 */
import { axpy, Tensor, type Device, type Stream } from '../../runtime/device/device-index.js';
import type { Communicator } from '../../runtime/comm/comm.js';
import { InternalError } from '../../runtime/errors.js';
import { CopyRanges } from '../../runtime/device/copy-ranges.js';
import { viewOf } from '../../runtime/device/views.js';
import { blockUnits, type FlatLayout, type FlatUnit } from './layout.js';
import type { ModelConfig } from '../../model/config.js';
import type { ModelBlock } from '../../model/qwen3.js';
import type { SlotPool } from './slot-pool.js';
import { valueView, type GatherStats, type PackTarget } from './unit-comm.js';

/**
 * Bytes of every unit gathered at once (dp x the units' shards) under which a step that keeps every
 * unit gathered fuses its collectives: the bucket is held besides the slots for the whole step.
 */
export const FUSED_BUCKET_BYTES = 32 * 1024 * 1024;

/** Each unit's offset in a rank's part of the bucket, and the part's size. */
export function bucketOffsets(units: readonly FlatUnit[]): { base: Map<FlatUnit, number>; total: number } {
  const base = new Map<FlatUnit, number>();
  let total = 0;
  for (const u of units) {
    base.set(u, total);
    total += u.shardNumel;
  }
  return { base, total };
}

/** Whether a step over `units` (every one kept gathered) fuses: all fp32 (no bf16 part to gather apart) and small. */
export function fusable(units: readonly FlatUnit[], dp: number): boolean {
  if (units.some((u) => (u.lowNumel ?? 0) > 0)) return false;
  return 4 * dp * bucketOffsets(units).total <= FUSED_BUCKET_BYTES;
}

/**
 * Enqueues one all-gather of every unit's shard and unpacks each unit into a slot of its own
 * (param-major, as gatherUnit leaves it): two copy ops and one collective for the whole model.
 * Returns the slots by unit. Stream-ordered: for a communicator in one process only.
 */
export function gatherAll(
  units: readonly FlatUnit[],
  shards: ReadonlyMap<FlatUnit, Tensor>,
  comm: Communicator,
  pool: SlotPool,
  stream: Stream,
  stats?: GatherStats,
): Map<FlatUnit, Tensor> {
  const dp = comm.size;
  const { base, total: T } = bucketOffsets(units);
  const device = pool.device;
  const out = new Map<FlatUnit, Tensor>();
  // Released at once: device memory returns to the pool only after the ops enqueued on it ran.
  const send = Tensor.empty(device, [T], 'fp32');
  const staging = Tensor.empty(device, [dp * T], 'fp32');
  try {
    const pack = new CopyRanges();
    for (const u of units) if (u.shardNumel > 0) pack.add(send, base.get(u)!, shards.get(u)!, 0, u.shardNumel);
    pack.enqueue(stream);
    void comm.allGather(send, staging, stream);
    const unpack = new CopyRanges();
    for (const u of units) {
      const values = pool.take();
      out.set(u, values);
      if (stats) stats.bytes += 4 * dp * u.shardNumel;
      for (const [i, p] of u.params.entries()) {
        // Padded full p = chunk p of rank 0, then of rank 1, ...
        const dst = valueView(u, values, i, dp, [dp * p.chunk]);
        for (let r = 0; r < dp; r++) unpack.add(dst, r * p.chunk, staging, r * T + base.get(u)! + p.offset, p.chunk);
      }
    }
    unpack.enqueue(stream);
    return out;
  } catch (e) {
    for (const v of out.values()) pool.give(v);
    throw e;
  } finally {
    send.release();
    staging.release();
  }
}

/**
 * The bucket a step's gradients are packed into for one reduce-scatter. It has a part per gather
 * of a unit: a unit two blocks gather (a tied embedding: the embed and head blocks) is packed
 * twice, and its two sums are added to its shard gradient in packing order, as the per-unit path
 * reduce-scatters it twice.
 */
export class GradBucket {
  private readonly base: number[];
  private readonly total: number;
  private buf: Tensor | null = null;
  /** Occurrence indices packed so far, in packing order. */
  private readonly packed: number[] = [];

  constructor(
    /** Every gather of a trainable unit in a step, in block order (a unit may repeat). */
    private readonly gathers: readonly FlatUnit[],
    private readonly dp: number,
    private readonly device: Device,
  ) {
    this.base = [];
    let total = 0;
    for (const u of gathers) {
      this.base.push(total);
      total += u.shardNumel;
    }
    this.total = total;
  }

  /** Where one gather of `unit`'s packed gradients goes (packGrads / packGradSources `into`). */
  target(unit: FlatUnit): PackTarget {
    const i = this.gathers.findIndex((u, k) => u === unit && !this.packed.includes(k));
    if (i < 0) throw new InternalError(`FSDP2: unit ${unit.key} was packed more often than the step's blocks gather it.`);
    this.buf ??= Tensor.empty(this.device, [this.dp * this.total], 'fp32');
    this.packed.push(i);
    return { buf: this.buf, stride: this.total, base: this.base[i]! };
  }

  /**
   * One reduce-scatter (sum) of everything packed, then each unit's shard gradient set to its
   * first sum (`assign(unit)`: nothing to keep, the step's first gradients) or increased by it,
   * and increased by any later sum. Units never packed are left alone (their parts are summed
   * too but read by no one). Returns the units whose shard gradient it wrote.
   * Stream-ordered: for a communicator in one process only.
   */
  reduceScatter(comm: Communicator, grads: ReadonlyMap<FlatUnit, Tensor>, assign: (u: FlatUnit) => boolean, stream: Stream): FlatUnit[] {
    const buf = this.buf;
    if (!buf) return [];
    this.buf = null;
    try {
      const T = this.total;
      const mine = viewOf(buf, [T], comm.rank * T);
      void comm.reduceScatter(buf, mine, 'sum', stream);
      const at = (i: number) => comm.rank * T + this.base[i]!;
      const written = new Set<FlatUnit>();
      const adds: number[] = [];
      const copies = new CopyRanges();
      for (const i of this.packed) {
        const u = this.gathers[i]!;
        if (!written.has(u) && assign(u)) {
          if (u.shardNumel > 0) copies.add(grads.get(u)!, 0, buf, at(i), u.shardNumel);
        } else adds.push(i);
        written.add(u);
      }
      // The first sums land before any later one is added.
      if (copies.length > 0) copies.enqueue(stream);
      for (const i of adds) {
        const u = this.gathers[i]!;
        if (u.shardNumel > 0) axpy(grads.get(u)!, 1, viewOf(buf, [u.shardNumel], at(i)), { stream });
      }
      return [...written];
    } finally {
      buf.release();
      this.packed.length = 0;
    }
  }

  /** Frees the bucket (after an error: nothing reduce-scattered). */
  dispose(): void {
    this.buf?.release();
    this.buf = null;
    this.packed.length = 0;
  }
}

/** Every gather of a unit in one forward, in block order: embed, each layer, head (a tied head gathers the embedding again). */
export function stepGathers(layout: FlatLayout, cfg: ModelConfig): FlatUnit[] {
  const blocks: ModelBlock[] = [
    { kind: 'embed' },
    ...Array.from({ length: cfg.numLayers }, (_, index) => ({ kind: 'layer' as const, index })),
    { kind: 'head' },
  ];
  return blocks.flatMap((b) => blockUnits(layout, cfg, b));
}
