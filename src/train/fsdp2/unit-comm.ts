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
import { axpy, fill, type Stream, type Tensor } from '../../runtime/device/device-index.js';
import type { Communicator } from '../../runtime/comm/comm.js';
import { copyRange, stridedRead, viewOf } from '../../runtime/device/views.js';
import type { FlatUnit } from './layout.js';
import type { SlotPool } from './slot-pool.js';

/**
 * All-gathers `shard` (this rank's flat shard [S] of `unit`) into a slot holding the
 * unsharded parameters param-major (each padded full tensor at dp·offset). Returns the slot.
 * Stream-ordered: for a communicator in one process only.
 */
export function gatherUnit(unit: FlatUnit, shard: Tensor, comm: Communicator, pool: SlotPool, stream: Stream): Tensor {
  const staging = pool.take();
  try {
    void comm.allGather(shard, viewOf(staging, [comm.size * unit.shardNumel]), stream);
    return unpackGathered(unit, staging, comm.size, pool, stream);
  } finally {
    pool.give(staging);
  }
}

/** gatherUnit that awaits the all-gather before reading it: for a communicator that spans processes. */
export async function gatherUnitAwaited(unit: FlatUnit, shard: Tensor, comm: Communicator, pool: SlotPool, stream: Stream): Promise<Tensor> {
  const staging = pool.take();
  try {
    await comm.allGather(shard, viewOf(staging, [comm.size * unit.shardNumel]), stream);
    return unpackGathered(unit, staging, comm.size, pool, stream);
  } finally {
    pool.give(staging);
  }
}

/** The rank-major gathered shards in `staging`, reordered param-major into a new slot. */
function unpackGathered(unit: FlatUnit, staging: Tensor, dp: number, pool: SlotPool, stream: Stream): Tensor {
  const S = unit.shardNumel;
  const gathered = viewOf(staging, [dp * S]);
  const values = pool.take();
  for (const p of unit.params) {
    // Padded full p = chunk p of every rank: a [dp, c_p] read with row stride S.
    stridedRead(viewOf(values, [dp * p.chunk], dp * p.offset), gathered, [dp, p.chunk], [S, 1], p.offset, stream);
  }
  return values;
}

/** The full tensor of parameter `i` of `unit` inside an unsharded slot (gathered values or gradients). */
export function fullView(unit: FlatUnit, slot: Tensor, i: number, dp: number): Tensor {
  const p = unit.params[i]!;
  return viewOf(slot, p.shape, dp * p.offset);
}

/** A zeroed slot for the unit's unsharded gradients. */
export function zeroGradSlot(unit: FlatUnit, dp: number, pool: SlotPool, stream: Stream): Tensor {
  const g = pool.take();
  fill(viewOf(g, [dp * unit.shardNumel]), 0, { stream });
  return g;
}

/** The unsharded gradients in `grads` (param-major), reordered rank-major into a new slot; gives `grads` back. */
function packGrads(unit: FlatUnit, grads: Tensor, dp: number, pool: SlotPool, stream: Stream): Tensor {
  const S = unit.shardNumel;
  try {
    const send = pool.take();
    for (let r = 0; r < dp; r++) {
      for (const p of unit.params) copyRange(send, r * S + p.offset, grads, dp * p.offset + r * p.chunk, p.chunk, stream);
    }
    return send;
  } finally {
    pool.give(grads);
  }
}

/**
 * shardGrad += this rank's chunk of Σ over ranks of the unsharded gradients in `grads`
 * (param-major): reordered rank-major into a slot, then ONE in-place reduce-scatter.
 * Gives `grads` back to the pool. Stream-ordered: for a communicator in one process only.
 */
export function reduceScatterUnit(unit: FlatUnit, grads: Tensor, shardGrad: Tensor, comm: Communicator, pool: SlotPool, stream: Stream): void {
  const S = unit.shardNumel;
  const send = packGrads(unit, grads, comm.size, pool, stream);
  try {
    const mine = viewOf(send, [S], comm.rank * S);
    void comm.reduceScatter(viewOf(send, [comm.size * S]), mine, 'sum', stream);
    axpy(shardGrad, 1, mine, { stream });
  } finally {
    pool.give(send);
  }
}

/**
 * reduceScatterUnit that awaits the reduce-scatter before adding it: for a communicator
 * that spans processes (which also does not reduce in place, so recv is a slot of its own).
 */
export async function reduceScatterUnitAwaited(
  unit: FlatUnit,
  grads: Tensor,
  shardGrad: Tensor,
  comm: Communicator,
  pool: SlotPool,
  stream: Stream,
): Promise<void> {
  const S = unit.shardNumel;
  const send = packGrads(unit, grads, comm.size, pool, stream);
  const recv = pool.take();
  try {
    const mine = viewOf(recv, [S]);
    await comm.reduceScatter(viewOf(send, [comm.size * S]), mine, 'sum', stream);
    axpy(shardGrad, 1, mine, { stream });
  } finally {
    pool.give(recv);
    pool.give(send);
  }
}
