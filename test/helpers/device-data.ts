/**
 * Seeded test data on a device for the kernel tests: a repeatable stream of floats in
 * [-scale, scale), fp32 / int32 tensors from arrays, and a tensor's fp32 values as raw bits
 * (for bit-for-bit comparisons).
 */
import { Tensor, type Device } from '../../src/runtime/device/device-index.js';

/** `rand(n, scale)`: the next n values of one linear congruential stream started at `seed`. */
export function seededRand(seed: number): (n: number, scale?: number) => Float32Array {
  let s = seed >>> 0;
  return (n, scale = 1) =>
    Float32Array.from({ length: n }, () => {
      s = (s * 1103515245 + 12345) >>> 0;
      return ((s / 2 ** 32) * 2 - 1) * scale;
    });
}

export const f32On = (d: Device) => (data: Float32Array, shape: number[]) => Tensor.fromArray(d, data, shape);
export const i32On = (d: Device) => (data: number[]) => Tensor.fromArray(d, Int32Array.from(data), [data.length]);
export const bits = async (t: Tensor) => new Uint32Array((await t.toArray()).slice().buffer);
