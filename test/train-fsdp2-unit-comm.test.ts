// FSDP2's unit collectives give back every slot they took exactly once, also when the collective
// throws or rejects, so the step's cleanup never hits a slot twice and the collective's own error
// is what surfaces (before, a failed reduce-scatter left its slots to a double give-back whose
// SlotPool error hid the real one).
import { describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import type { Communicator } from '../src/runtime/comm/comm.js';
import type { FlatUnit } from '../src/train/fsdp2/layout.js';
import { SlotPool } from '../src/train/fsdp2/slot-pool.js';
import { gatherUnit, gatherUnitAwaited, reduceScatterUnit, reduceScatterUnitAwaited, zeroGradSlot } from '../src/train/fsdp2/unit-comm.js';

const dp = 2;
/** One [4] parameter split over 2 ranks: chunks of 2. */
const unit: FlatUnit = { key: 'layer.0', trainable: true, shardNumel: 2, params: [{ name: 'w', shape: [4], rowNumel: 1, chunkRows: 2, chunk: 2, offset: 0 }] };
const boom = new Error('the collective failed');
const throwing = {
  size: dp,
  rank: 0,
  allGather: () => {
    throw boom;
  },
  reduceScatter: () => {
    throw boom;
  },
} as unknown as Communicator;
const rejecting = { size: dp, rank: 0, allGather: () => Promise.reject(boom), reduceScatter: () => Promise.reject(boom) } as unknown as Communicator;

/** Every slot the pool made is free: taking that many allocates nothing new. */
function expectAllFree(pool: SlotPool): void {
  const n = pool.allocated;
  expect(n).toBeGreaterThan(0);
  const taken = Array.from({ length: n }, () => pool.take());
  expect(pool.allocated).toBe(n);
  expect(new Set(taken).size).toBe(n);
  for (const t of taken) pool.give(t);
}

describe('fsdp2 unit collectives give slots back once when the collective fails', () => {
  const device = Device.get(0);
  const stream = device.defaultStream;
  const shard = () => ({ pool: new SlotPool(device, dp * unit.shardNumel) });

  it('gatherUnit: a throwing all-gather surfaces as itself and leaves no slot taken', () => {
    const { pool } = shard();
    const param = pool.take();
    pool.give(param);
    expect(() => gatherUnit(unit, param, throwing, pool, stream)).toThrow(boom);
    expectAllFree(pool);
    pool.dispose();
  });

  it('gatherUnitAwaited: a rejected all-gather surfaces as itself and leaves no slot taken', async () => {
    const { pool } = shard();
    const param = pool.take();
    pool.give(param);
    await expect(gatherUnitAwaited(unit, param, rejecting, pool, stream)).rejects.toBe(boom);
    expectAllFree(pool);
    pool.dispose();
  });

  it('reduceScatterUnit: a throwing reduce-scatter surfaces as itself; grads and its send slot are given back once', () => {
    const { pool } = shard();
    const shardGrad = pool.take();
    const grads = zeroGradSlot(unit, dp, pool, stream);
    expect(() => reduceScatterUnit(unit, grads, shardGrad, throwing, pool, stream)).toThrow(boom);
    // grads now belongs to the pool: a second give-back is the caller's bug, named as such.
    expect(() => pool.give(grads)).toThrow(/already given back/);
    pool.give(shardGrad);
    expectAllFree(pool);
    pool.dispose();
  });

  it('reduceScatterUnitAwaited: a rejected reduce-scatter surfaces as itself; grads, send and recv slots are given back once', async () => {
    const { pool } = shard();
    const shardGrad = pool.take();
    const grads = zeroGradSlot(unit, dp, pool, stream);
    await expect(reduceScatterUnitAwaited(unit, grads, shardGrad, rejecting, pool, stream)).rejects.toBe(boom);
    expect(() => pool.give(grads)).toThrow(/already given back/);
    pool.give(shardGrad);
    expectAllFree(pool);
    pool.dispose();
  });
});
