/**
 * The two collectives of an FSDP2 unit: the all-gather of the unit's flat shards into
 * unsharded (param-major) parameters, and the reduce-scatter (sum) of the unit's
 * unsharded flat gradient into this rank's shard gradient. Layout: see layout.ts.
 *
 * In one process both are enqueued on the strategy's stream with no host sync (recv is
 * ready in stream order). When the communicator spans processes, recv is ready only when
 * the collective's promise resolves (see Communicator.spansProcesses): the awaited
 * variants serve that case. Every function gives back the slots it took, also when the
 * collective throws, so the pool never sees a slot twice and the first error surfaces.
 */
import { axpy, cast, fill, Tensor, type Stream } from '../../runtime/device/device-index.js';
import type { Communicator } from '../../runtime/comm/comm.js';
import { InvalidArgumentError } from '../../runtime/errors.js';
import { CopyRanges } from '../../runtime/device/copy-ranges.js';
import { CopyPlan } from '../../runtime/device/copy-plan.js';
import { viewOf } from '../../runtime/device/views.js';
import type { FlatUnit } from './layout.js';
import type { SlotPool } from './slot-pool.js';

/** Bytes the step's all-gathers moved into this rank (recv sizes), kept by whoever passes one. */
export interface GatherStats {
  bytes: number;
}

/**
 * A bf16 view of `n` elements from bf16 element `elemOffset` of an fp32 slot. A bf16 unit's
 * bf16 part lives in the slot's first bytes: its dp·L bf16 elements end (2·dp·L bytes) before
 * the fp32 part begins (fp32 element dp·L), so both fit in one slot without overlapping.
 */
function bf16View(slot: Tensor, n: number, elemOffset = 0): Tensor {
  return new Tensor(slot.device, slot.buffer, 'bf16', [n], undefined, slot.byteOffset + 2 * elemOffset);
}

/**
 * Enqueues the unit's all-gathers into `staging` (rank-major): one fp32 all-gather of the
 * shard, or, for a bf16 unit (lowNumel L > 0), the first L elements cast to bf16 and
 * gathered as bf16 (half the bytes) plus the rest gathered in fp32 (skipped when empty).
 * Returns the collectives and the bf16 send tensor (the caller releases it once they were
 * enqueued in one process, or resolved across processes, whose transfer may read it later).
 */
function allGatherParts(
  unit: FlatUnit,
  shard: Tensor,
  staging: Tensor,
  comm: Communicator,
  stream: Stream,
  stats?: GatherStats,
): { ops: Array<Promise<void>>; low: Tensor | null } {
  const dp = comm.size;
  const S = unit.shardNumel;
  const L = unit.lowNumel ?? 0;
  if (L === 0) {
    if (stats) stats.bytes += 4 * dp * S;
    return { ops: [comm.allGather(shard, viewOf(staging, [dp * S]), stream)], low: null };
  }
  const low = cast(viewOf(shard, [L]), 'bf16', { stream });
  const ops: Array<Promise<void>> = [];
  try {
    ops.push(comm.allGather(low, bf16View(staging, dp * L), stream));
    if (S > L) ops.push(comm.allGather(viewOf(shard, [S - L], L), viewOf(staging, [dp * (S - L)], dp * L), stream));
  } catch (e) {
    low.release();
    throw e;
  }
  if (stats) stats.bytes += 2 * dp * L + 4 * dp * (S - L);
  return { ops, low };
}

/**
 * All-gathers `shard` (this rank's flat shard [S] of `unit`) into a slot holding the
 * unsharded parameters param-major (each padded full tensor at dp·offset; see valueView).
 * Returns the slot. Stream-ordered: for a communicator in one process only.
 */
export function gatherUnit(unit: FlatUnit, shard: Tensor, comm: Communicator, pool: SlotPool, stream: Stream, stats?: GatherStats): Tensor {
  const staging = pool.take();
  try {
    // Stream-ordered: the bf16 send's memory returns to the pool only after the all-gather ran.
    allGatherParts(unit, shard, staging, comm, stream, stats).low?.release();
    return unpackGathered(unit, staging, comm.size, pool, stream);
  } finally {
    pool.give(staging);
  }
}

/** gatherUnit that awaits the all-gathers before reading them: for a communicator that spans processes. */
export async function gatherUnitAwaited(
  unit: FlatUnit,
  shard: Tensor,
  comm: Communicator,
  pool: SlotPool,
  stream: Stream,
  stats?: GatherStats,
): Promise<Tensor> {
  const staging = pool.take();
  try {
    const { ops, low } = allGatherParts(unit, shard, staging, comm, stream, stats);
    try {
      await Promise.all(ops);
    } finally {
      low?.release();
    }
    return unpackGathered(unit, staging, comm.size, pool, stream);
  } finally {
    pool.give(staging);
  }
}

/**
 * The rank-major gathered shards in `staging`, reordered param-major into a new slot (bf16 part
 * as bf16): ONE copyRanges of dp ranges per parameter (chunk p of every rank, row stride L in the
 * bf16 part, S - L after it), not one strided read per parameter (each a separate stream op).
 * The ranges depend only on the unit's layout and dp: built once per unit (unpackPlan), then
 * bound to the step's two slots.
 */
function unpackGathered(unit: FlatUnit, staging: Tensor, dp: number, pool: SlotPool, stream: Stream): Tensor {
  const values = pool.take();
  try {
    unpackPlan(unit, dp, values, staging).enqueue(stream, [values, staging]);
  } catch (e) {
    pool.give(values);
    throw e;
  }
  return values;
}

const unpackPlans = new WeakMap<FlatUnit, { dp: number; plan: CopyPlan }>();

/** The unpack ranges of `unit` over `dp` ranks (roles: values slot, staging slot), built against the given slots on first use. */
function unpackPlan(unit: FlatUnit, dp: number, values: Tensor, staging: Tensor): CopyPlan {
  const hit = unpackPlans.get(unit);
  if (hit?.dp === dp) return hit.plan;
  const S = unit.shardNumel;
  const L = unit.lowNumel ?? 0;
  const low = bf16View(staging, dp * L);
  const rest = viewOf(staging, [dp * (S - L)], dp * L);
  const list = new CopyRanges();
  for (const [i, p] of unit.params.entries()) {
    const [src, row, first] = p.offset < L ? [low, L, p.offset] : [rest, S - L, p.offset - L];
    // Padded full p = chunk p of rank 0, then of rank 1, ...
    const dst = valueView(unit, values, i, dp, [dp * p.chunk]);
    for (let r = 0; r < dp; r++) list.add(dst, r * p.chunk, src, r * row + first, p.chunk);
  }
  const plan = CopyPlan.from(list, [values, staging]);
  unpackPlans.set(unit, { dp, plan });
  return plan;
}

/** The full tensor of parameter `i` of `unit` inside an unsharded gradient slot (always fp32). */
export function fullView(unit: FlatUnit, slot: Tensor, i: number, dp: number): Tensor {
  const p = unit.params[i]!;
  return viewOf(slot, p.shape, dp * p.offset);
}

/** The unsharded value of parameter `i` of `unit` in a gathered slot: bf16 for the unit's bf16 part, else fp32. */
export function valueView(unit: FlatUnit, slot: Tensor, i: number, dp: number, shape?: readonly number[]): Tensor {
  const p = unit.params[i]!;
  if (p.offset >= (unit.lowNumel ?? 0)) return viewOf(slot, shape ?? p.shape, dp * p.offset);
  const n = (shape ?? p.shape).reduce((a, b) => a * b, 1);
  return bf16View(slot, n, dp * p.offset).reshape(shape ?? p.shape);
}

/** A zeroed slot for the unit's unsharded gradients. */
export function zeroGradSlot(unit: FlatUnit, dp: number, pool: SlotPool, stream: Stream): Tensor {
  const g = pool.take();
  fill(viewOf(g, [dp * unit.shardNumel]), 0, { stream });
  return g;
}

/**
 * Where packed gradients go: rank r's shard of the unit at `r * stride + base` of `buf`. Default
 * (none given): a slot of its own, stride the unit's shardNumel, base 0; a fused reduce-scatter
 * (fused-comm.ts) packs every unit into one bucket, stride the units' total shard size.
 */
export interface PackTarget {
  buf: Tensor;
  stride: number;
  base: number;
}

/** `into`, or a new slot of the pool holding the unit's packed gradients alone. */
function packTarget(unit: FlatUnit, pool: SlotPool, into: PackTarget | undefined): PackTarget {
  return into ?? { buf: pool.take(), stride: unit.shardNumel, base: 0 };
}

/** The unsharded gradients in `grads` (param-major), reordered rank-major into a new slot (or `into`); gives `grads` back. */
export function packGrads(unit: FlatUnit, grads: Tensor, dp: number, pool: SlotPool, stream: Stream, into?: PackTarget): Tensor {
  try {
    const { buf: send, stride, base } = packTarget(unit, pool, into);
    // dp x params pieces of a few hundred bytes each: one op for all of them, not one copy each.
    const list = new CopyRanges();
    for (let r = 0; r < dp; r++) {
      for (const p of unit.params) list.add(send, r * stride + base + p.offset, grads, dp * p.offset + r * p.chunk, p.chunk);
    }
    list.enqueue(stream);
    return send;
  } finally {
    pool.give(grads);
  }
}

/** Zeros a unit's padding rows need in packGradSources: the most padding any parameter of `units` has over `dp` ranks. */
export function padNumel(units: readonly FlatUnit[], dp: number): number {
  let most = 0;
  for (const u of units) for (const p of u.params) most = Math.max(most, dp * p.chunk - p.shape.reduce((a, b) => a * b, 1));
  return most;
}

/**
 * The unit's full gradients, one contiguous fp32 tensor per parameter (`sources[i]`, as backward
 * produced them), packed rank-major into a new slot (or `into`) with ONE copyRanges: rank r's chunk of each
 * parameter, its padding rows (past the tensor's end) copied from `zeros` (at least
 * padNumel(...) zeros). Bitwise what packGrads gives for a zeroed slot each source was added to
 * (0 + g is g) except that a -0 stays -0 there, which no sum, square or AdamW update tells apart.
 */
export function packGradSources(
  unit: FlatUnit,
  sources: readonly Tensor[],
  zeros: Tensor,
  dp: number,
  pool: SlotPool,
  stream: Stream,
  into?: PackTarget,
): Tensor {
  if (sources.length !== unit.params.length) {
    throw new InvalidArgumentError(`packGradSources(): unit ${unit.key} has ${unit.params.length} parameters but ${sources.length} gradients were given.`);
  }
  const list = new CopyRanges();
  const { buf: send, stride: S, base } = packTarget(unit, pool, into);
  try {
    for (let r = 0; r < dp; r++) {
      for (const [i, p] of unit.params.entries()) {
        const g = sources[i]!;
        if (g.numel !== p.rowNumel * p.shape[0]!) {
          throw new InvalidArgumentError(
            `packGradSources(): the gradient of ${p.name} has ${g.numel} elements but the parameter [${p.shape.join(', ')}] has ${p.rowNumel * p.shape[0]!}.`,
          );
        }
        const at = r * S + base + p.offset;
        const n = Math.min(p.chunk, Math.max(0, g.numel - r * p.chunk));
        if (n > 0) list.add(send, at, g, r * p.chunk, n);
        if (n < p.chunk) list.add(send, at + n, zeros, 0, p.chunk - n);
      }
    }
    list.enqueue(stream);
    return send;
  } catch (e) {
    if (!into) pool.give(send);
    throw e;
  }
}

/**
 * shardGrad += this rank's chunk of Σ over ranks of the unsharded gradients in `grads`
 * (param-major): reordered rank-major into a slot, then ONE in-place reduce-scatter and
 * an add; with `assign` (shardGrad holds nothing to keep: the step's first gradients),
 * shardGrad = that chunk instead, the reduce-scatter writing it directly (no add).
 * Gives `grads` back to the pool. Stream-ordered: for a communicator in one process only.
 */
export function reduceScatterUnit(unit: FlatUnit, grads: Tensor, shardGrad: Tensor, comm: Communicator, pool: SlotPool, stream: Stream, assign = false): void {
  reduceScatterPacked(unit, packGrads(unit, grads, comm.size, pool, stream), shardGrad, comm, pool, stream, assign);
}

/** reduceScatterUnit from gradients already packed rank-major in `send` (packGrads, packGradSources); gives `send` back. */
export function reduceScatterPacked(unit: FlatUnit, send: Tensor, shardGrad: Tensor, comm: Communicator, pool: SlotPool, stream: Stream, assign = false): void {
  const S = unit.shardNumel;
  try {
    const all = viewOf(send, [comm.size * S]);
    if (assign) {
      void comm.reduceScatter(all, shardGrad, 'sum', stream);
      return;
    }
    const mine = viewOf(send, [S], comm.rank * S);
    void comm.reduceScatter(all, mine, 'sum', stream);
    axpy(shardGrad, 1, mine, { stream });
  } finally {
    pool.give(send);
  }
}

/**
 * reduceScatterUnit that awaits the reduce-scatter before adding it: for a communicator
 * that spans processes (which also does not reduce in place, so recv is a slot of its own).
 */
export function reduceScatterUnitAwaited(unit: FlatUnit, grads: Tensor, shardGrad: Tensor, comm: Communicator, pool: SlotPool, stream: Stream): Promise<void> {
  return reduceScatterPackedAwaited(unit, packGrads(unit, grads, comm.size, pool, stream), shardGrad, comm, pool, stream);
}

/** reduceScatterUnitAwaited from gradients already packed rank-major in `send`; gives `send` back. */
export async function reduceScatterPackedAwaited(
  unit: FlatUnit,
  send: Tensor,
  shardGrad: Tensor,
  comm: Communicator,
  pool: SlotPool,
  stream: Stream,
): Promise<void> {
  const S = unit.shardNumel;
  let recv: Tensor | null = null;
  try {
    recv = pool.take();
    const mine = viewOf(recv, [S]);
    await comm.reduceScatter(viewOf(send, [comm.size * S]), mine, 'sum', stream);
    axpy(shardGrad, 1, mine, { stream });
  } finally {
    if (recv) pool.give(recv);
    pool.give(send);
  }
}
