/** Shared pieces of the finite-difference gradient tests of the single-device model. */
import type { Device } from '../../src/runtime/device/device.js';
import { Tensor, copy } from '../../src/runtime/device/device-index.js';
import type { HostParam } from '../../src/model/param-store.js';
import type { SingleDeviceStrategy } from '../../src/train/single.js';
import type { TrainBatch } from '../../src/train/strategy.js';

/** A seeded next-token batch: ids spread over the vocabulary, targets shifted by one (last position ignored). */
export function shiftedBatch(seed: number, B: number, S: number, vocabSize: number): TrainBatch {
  const ids = new Int32Array(B * S);
  for (let i = 0; i < ids.length; i++) ids[i] = (seed * 7919 + i * 104729) % vocabSize;
  const targets = new Int32Array(B * S).fill(-100);
  for (let b = 0; b < B; b++) for (let s = 0; s < S - 1; s++) targets[b * S + s] = ids[b * S + s + 1]!;
  return { inputIds: ids, targets, batch: B, seqLen: S };
}

/**
 * The loss of `data` with element `idx` of parameter `name` moved by `delta` from `values`
 * (the host copy of the parameters); the device parameter keeps the moved value until the next
 * call, so a caller ends with delta 0 to restore it.
 */
export function perturbedLoss(s: SingleDeviceStrategy, dev: Device, values: ReadonlyMap<string, HostParam>, data: TrainBatch) {
  const stream = dev.defaultStream;
  return async (name: string, idx: number, delta: number): Promise<number> => {
    const v = values.get(name)!.data;
    const saved = v[idx]!;
    v[idx] = saved + delta;
    const t = s.store.get(name).value;
    const tmp = Tensor.fromArray(dev, v, t.shape, { stream });
    copy(t, tmp, { stream });
    tmp.release();
    v[idx] = saved;
    return (await s.forward(data)).loss!;
  };
}
