/**
 * Host-side widening of checkpoint tensors to fp32: F32 as is, BF16 (the top 16 bits of an
 * fp32) and F16 (IEEE half, subnormals and inf/NaN included) converted exactly. Training
 * keeps fp32 master weights whatever dtype the checkpoint stores.
 */
import { CheckpointFormatError } from '../runtime/errors.js';
import type { SafetensorsDType } from './safetensors.js';

const WIDENED: readonly SafetensorsDType[] = ['F32', 'BF16', 'F16'];

/** IEEE binary16 bits → fp32 value. */
export function halfToFloat(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** The little-endian bytes of one tensor of `dtype`, widened to fp32. */
export function toFloat32(bytes: Uint8Array, dtype: SafetensorsDType, where: { file: string; tensor: string }): Float32Array {
  if (!WIDENED.includes(dtype)) {
    throw new CheckpointFormatError(
      `${where.file}: ${where.tensor} is ${dtype}; model weights load from F32, BF16 or F16 tensors. HINT: convert the checkpoint's floating-point weights to one of these.`,
      { file: where.file, tensor: where.tensor, dtype },
    );
  }
  if (dtype === 'F32') {
    const out = new Float32Array(bytes.byteLength / 4);
    new Uint8Array(out.buffer).set(bytes);
    return out;
  }
  const n = bytes.byteLength / 2;
  const halves = new Uint16Array(n);
  new Uint8Array(halves.buffer).set(bytes);
  if (dtype === 'BF16') {
    const bits = new Uint32Array(n);
    for (let i = 0; i < n; i++) bits[i] = halves[i]! << 16;
    return new Float32Array(bits.buffer);
  }
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = halfToFloat(halves[i]!);
  return out;
}
