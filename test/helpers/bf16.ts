/**
 * Host bf16 for the bf16 engine tests, independent of the device cast: the
 * round-to-nearest-even upper half of each fp32 (NaN kept quiet), as bytes.
 */
import { runtimeChecksum, runtimeDtypeOf, type EngineDtype } from '../../src/rollout/index.js';

/** bf16 bytes of `a` (2 per element, little endian). */
export function bf16Bytes(a: Float32Array): Uint8Array {
  const u = new Uint32Array(Float32Array.from(a).buffer);
  const out = new Uint16Array(u.length);
  for (let i = 0; i < u.length; i++) {
    const v = u[i]!;
    out[i] = (v & 0x7fffffff) > 0x7f800000 ? (v >>> 16) | 0x40 : ((v + 0x7fff + ((v >>> 16) & 1)) >>> 16) & 0xffff;
  }
  return new Uint8Array(out.buffer);
}

/** The fp32 values `a` rounds to in bf16. */
export function roundedToBf16(a: Float32Array): Float32Array {
  const h = new Uint16Array(bf16Bytes(a).buffer);
  const u = new Uint32Array(h.length);
  for (let i = 0; i < h.length; i++) u[i] = h[i]! << 16;
  return new Float32Array(u.buffer);
}

/** Checksums of runtime tensors (fp32 values) as an engine of weight precision `dtype` holds them. */
export function checksumsAs(runtime: ReadonlyMap<string, Float32Array>, dtype: EngineDtype): Record<string, string> {
  return Object.fromEntries(
    [...runtime].map(([n, a]) => [
      n,
      runtimeChecksum(runtimeDtypeOf(n, dtype) === 'bf16' ? bf16Bytes(a) : new Uint8Array(a.buffer, a.byteOffset, a.byteLength)),
    ]),
  );
}
