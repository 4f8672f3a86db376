/**
 * The two collectives of an FSDP2 unit, both enqueued on the strategy's stream (no
 * host sync): the all-gather of the unit's flat shards into unsharded (param-major)
 * parameters, and the reduce-scatter (sum) of the unit's unsharded flat gradient into
 * this rank's shard gradient. Layout: see layout.ts.
 */
import { axpy, fill, type Stream, type Tensor } from '../../runtime/device/device-index.js';
import type { Communicator } from '../../runtime/comm/comm.js';
import { copyRange, stridedRead, viewOf } from '../../runtime/device/views.js';
import type { FlatUnit } from './layout.js';
import type { SlotPool } from './slot-pool.js';

/**
 * All-gathers `shard` (this rank's flat shard [S] of `unit`) into a slot holding the
 * unsharded parameters param-major (each padded full tensor at dp·offset). Returns the slot.
 */
export function gatherUnit(unit: FlatUnit, shard: Tensor, comm: Communicator, pool: SlotPool, stream: Stream): Tensor {
  const dp = comm.size;
  const S = unit.shardNumel;
  const staging = pool.take();
  const gathered = viewOf(staging, [dp * S]);
  void comm.allGather(shard, gathered, stream);
  const values = pool.take();
  for (const p of unit.params) {
    // Padded full p = chunk p of every rank: a [dp, c_p] read with row stride S.
    stridedRead(viewOf(values, [dp * p.chunk], dp * p.offset), gathered, [dp, p.chunk], [S, 1], p.offset, stream);
  }
  pool.give(staging);
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

/**
 * shardGrad += this rank's chunk of Σ over ranks of the unsharded gradients in `grads`
 * (param-major): reordered rank-major into a slot, then ONE in-place reduce-scatter.
 * Gives `grads` back to the pool.
 */
export function reduceScatterUnit(unit: FlatUnit, grads: Tensor, shardGrad: Tensor, comm: Communicator, pool: SlotPool, stream: Stream): void {
  const dp = comm.size;
  const S = unit.shardNumel;
  const send = pool.take();
  for (let r = 0; r < dp; r++) {
    for (const p of unit.params) copyRange(send, r * S + p.offset, grads, dp * p.offset + r * p.chunk, p.chunk, stream);
  }
  pool.give(grads);
  const mine = viewOf(send, [S], comm.rank * S);
  void comm.reduceScatter(viewOf(send, [dp * S]), mine, 'sum', stream);
  axpy(shardGrad, 1, mine, { stream });
  pool.give(send);
}
