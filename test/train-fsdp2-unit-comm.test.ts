// FSDP2's unit collectives give back every slot they took exactly once, also when the collective
// throws or rejects, so the step's cleanup never hits a slot twice and the collective's own error
// is what surfaces (before, a failed reduce-scatter left its slots to a double give-back whose
// SlotPool error hid the real one).
import { describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import type { Communicator } from '../src/runtime/comm/comm.js';
import type { FlatUnit } from '../src/train/fsdp2/layout.js';
import { SlotPool } from '../src/train/fsdp2/slot-pool.js';
import {
  fullView,
  gatherUnit,
  gatherUnitAwaited,
  packGradSources,
  packGrads,
  padNumel,
  reduceScatterUnit,
  reduceScatterUnitAwaited,
  zeroGradSlot,
} from '../src/train/fsdp2/unit-comm.js';
import { axpy, Tensor } from '../src/runtime/device/device-index.js';

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

describe('fsdp2 gradients packed straight from the tensors backward made', () => {
  const device = Device.get(0);
  const stream = device.defaultStream;
  // [3, 2] and [1] over 2 ranks: chunks of 2 rows (4 elements) and 1; rank 1 holds one padding row of w and all of b's.
  const padded: FlatUnit = {
    key: 'layer.0',
    trainable: true,
    shardNumel: 5,
    params: [
      { name: 'w', shape: [3, 2], rowNumel: 2, chunkRows: 2, chunk: 4, offset: 0 },
      { name: 'b', shape: [1], rowNumel: 1, chunkRows: 1, chunk: 1, offset: 4 },
    ],
  };
  const values = (n: number, seed: number) => Float32Array.from({ length: n }, (_, i) => (i % 3 === 2 ? -0 : Math.sin(seed + i) * 7.3));

  it('packGradSources equals adding each gradient to a zeroed slot and packing it (padding zero), in one op', async () => {
    expect(padNumel([padded], dp)).toBe(2);
    const pool = new SlotPool(device, dp * padded.shardNumel);
    const zeros = Tensor.zeros(device, [padNumel([padded], dp)], 'fp32');
    const gw = Tensor.fromArray(device, values(6, 1), [3, 2]);
    const gb = Tensor.fromArray(device, values(1, 2), [1]);
    // The tape's way: a zeroed slot, each gradient added into its parameter's view, then packed.
    const slot = zeroGradSlot(padded, dp, pool, stream);
    axpy(fullView(padded, slot, 0, dp), 1, gw, { stream });
    axpy(fullView(padded, slot, 1, dp), 1, gb, { stream });
    const want = packGrads(padded, slot, dp, pool, stream);
    const got = packGradSources(padded, [gw, gb], zeros, dp, pool, stream);
    const w = (await want.toArray({ stream })) as Float32Array;
    const g = (await got.toArray({ stream })) as Float32Array;
    // Rank-major [w rows 0-1 | b | w row 2, padding | b padding]; the adds turned -0 into +0, the copies keep it.
    expect(Array.from(g.subarray(0, 10)).map((x) => x + 0)).toEqual(Array.from(w.subarray(0, 10)));
    expect(Array.from(g.subarray(7, 10))).toEqual([0, 0, 0]);
    expect(Object.is(g[2], -0)).toBe(true);
    pool.give(want);
    pool.give(got);
    pool.dispose();
    for (const t of [zeros, gw, gb]) t.release();
  });

  it('a gradient of the wrong size or too few zeros for the padding is an error naming it; the send slot is given back', () => {
    const pool = new SlotPool(device, dp * padded.shardNumel);
    const zeros = Tensor.zeros(device, [1], 'fp32');
    const gw = Tensor.zeros(device, [6], 'fp32');
    const gb = Tensor.zeros(device, [1], 'fp32');
    const wrong = Tensor.zeros(device, [4], 'fp32');
    expect(() => packGradSources(padded, [wrong, gb], zeros, dp, pool, stream)).toThrow(/gradient of w has 4 elements but the parameter \[3, 2\] has 6/);
    expect(() => packGradSources(padded, [gw], zeros, dp, pool, stream)).toThrow(/unit layer\.0 has 2 parameters but 1 gradients/);
    expect(() => packGradSources(padded, [gw, gb], zeros, dp, pool, stream)).toThrow(/src elements \[0, 2\) are outside/);
    expectAllFree(pool);
    pool.dispose();
    for (const t of [zeros, gw, gb, wrong]) t.release();
  });
});
