/**
 * Seeded token sampling (native/kernels/model/sampling.cc). The RNG is Philox4x32-10
 * (counter-based, as cuRAND / torch.cuda): key = seed (64 bits), counter = (offset,
 * row, 0). Row b's draw depends only on (seed, offset, b), so the same call gives the
 * same tokens on any stream, thread or rank; advance `offset` by one per step.
 */
import { InvalidArgumentError } from '../../runtime/errors.js';
import { BUFFER_HANDLE, loadNative } from '../../runtime/native.js';
import type { Tensor } from '../../runtime/device/tensor.js';
import { Device } from '../../runtime/device/device.js';
import { enqueue, intArg, numberArg, placement, shapeArg, tensorArg, withOutputs, type KernelOptions } from './common.js';

export interface SampleOptions extends KernelOptions {
  /** 0 = greedy argmax (ties -> lower index). Default 1. */
  temperature?: number;
  /** Keep the k most likely tokens (0 = all; default 0). */
  topK?: number;
  /** Keep the smallest most-likely set whose mass reaches topP, in (0, 1] (default 1). */
  topP?: number;
  /** Non-negative integer < 2^53 (default 0). */
  seed?: number;
  /** Philox counter: one per sampling step (default 0). */
  offset?: number;
}

const TWO32 = 2 ** 32;

function words(fn: string, v: number, name: string): [number, number] {
  intArg(fn, v, name, 0);
  return [v % TWO32, Math.floor(v / TWO32)];
}

/** One token id per row of logits [B, V] fp32 -> int32 [B]. */
export function sample(logits: Tensor, options?: SampleOptions): Tensor {
  const fn = 'sample';
  tensorArg(fn, logits, 'logits', 'fp32');
  const p = placement(fn, { logits }, options, ['temperature', 'topK', 'topP', 'seed', 'offset']);
  const [B, V] = shapeArg(fn, logits, 'logits', [null, null], 'B, V') as [number, number];
  intArg(fn, V, 'V (logits.shape[1])', 1);
  const temperature = numberArg(fn, options?.temperature ?? 1, 'temperature', (t) => t >= 0, '>= 0');
  const topK = intArg(fn, options?.topK ?? 0, 'topK', 0);
  const topP = numberArg(fn, options?.topP ?? 1, 'topP', (x) => x > 0 && x <= 1, 'in (0, 1]');
  const [sLo, sHi] = words(fn, options?.seed ?? 0, 'seed');
  const [oLo, oHi] = words(fn, options?.offset ?? 0, 'offset');
  return withOutputs(p.device, { out: [[B], 'int32'] }, ({ out }) =>
    enqueue(p, 'sample', B, V, temperature, topK, topP, sLo, sHi, oLo, oHi, logits.buffer[BUFFER_HANDLE], logits.byteOffset, out.buffer[BUFFER_HANDLE], 0),
  ).out;
}

/** Philox4x32-10 of one (key, counter) block: the generator sample() uses (for known-answer tests). */
export function philox4x32(key: readonly [number, number], counter: readonly [number, number, number, number]): [number, number, number, number] {
  const all = [...key, ...counter];
  if (all.length !== 6 || all.some((w) => typeof w !== 'number' || !Number.isInteger(w) || w < 0 || w >= TWO32)) {
    throw new InvalidArgumentError('philox4x32() expects 2 key words and 4 counter words, each a uint32.');
  }
  loadNative();
  return Device.get(0).defaultStream.native.modelOp('philox', key[0], key[1], counter[0], counter[1], counter[2], counter[3]);
}
