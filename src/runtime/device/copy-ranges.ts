/**
 * Many device-to-device copies as ONE stream op (native copyRanges): a packing or
 * unpacking loop that would issue one copy() per piece (hundreds per training step, each
 * a view, a JS call chain, a native enqueue and a stream hand-off for a few hundred
 * bytes) collects its ranges here and enqueues them at once.
 *
 * Semantics (native/copy_ranges_op.cc): the ranges run in the order they were added,
 * each a memcpy, so the result is bitwise that of one copy() per range in that order. A
 * range whose src and dst overlap in one buffer is rejected (a gather/scatter never
 * needs one: it is an offset bug; copy() stays the op for shifting bytes in place).
 * Zero-length ranges are allowed and copy nothing.
 *
 * Every range is checked when it is added, in element units, naming its index; a bad one
 * throws InvalidArgumentError and nothing of the list is enqueued. Buffers stay alive
 * until the op ran, as for copy() (the native op holds every buffer it copies between).
 */
import { describe, dtypeSize } from './dtype.js';
import { InvalidArgumentError } from '../errors.js';
import type { DeviceBuffer } from './device.js';
import type { Stream } from './stream.js';
import { Tensor } from './tensor.js';

const FIELDS = 5;

function checkCount(v: unknown, what: string, index: number): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
    throw new InvalidArgumentError(`copyRanges(): range ${index}: expected a non-negative integer for ${what} but received ${describe(v)}.`, {
      range: index,
      argument: what,
    });
  }
  return v;
}

function checkSide(t: unknown, name: string, index: number): Tensor {
  if (!(t instanceof Tensor))
    throw new InvalidArgumentError(`copyRanges(): range ${index}: expected a Tensor for ${name} but received ${describe(t)}.`, { range: index });
  t.checkLive(name);
  if (!t.isContiguous) throw new InvalidArgumentError(`copyRanges(): range ${index}: ${name} ${t} must be contiguous.`, { range: index, argument: name });
  return t;
}

/** A list of copies between contiguous tensors of one device, enqueued as one op. */
export class CopyRanges {
  readonly #buffers: DeviceBuffer[] = [];
  #ranges = new Float64Array(FIELDS * 16);
  #count = 0;
  #device = -1;

  /** Ranges added since the last enqueue. */
  get length(): number {
    return this.#count;
  }

  /**
   * Adds dst[dstOffset, dstOffset + count) <- src[srcOffset, srcOffset + count), in
   * elements of their (equal) dtype. Throws, naming this range's index, if it does not
   * fit, the dtypes or devices differ, or its src and dst overlap.
   */
  add(dst: Tensor, dstOffset: number, src: Tensor, srcOffset: number, count: number): this {
    const i = this.#count;
    checkSide(dst, 'dst', i);
    checkSide(src, 'src', i);
    checkCount(dstOffset, 'dstOffset', i);
    checkCount(srcOffset, 'srcOffset', i);
    checkCount(count, 'count', i);
    if (dst.dtype !== src.dtype) {
      throw new InvalidArgumentError(`copyRanges(): range ${i}: dst is ${dst.dtype} but src is ${src.dtype}. HINT: cast() first.`, { range: i });
    }
    const device = this.#device < 0 ? dst.device.ordinal : this.#device;
    if (dst.device.ordinal !== device || src.device.ordinal !== device) {
      throw new InvalidArgumentError(
        `copyRanges(): range ${i}: every tensor must be on device ${device} but dst is on device ${dst.device.ordinal} and src on device ${src.device.ordinal}. HINT: copyPeer() across devices.`,
        { range: i, expectedDevice: device },
      );
    }
    for (const [t, off, name] of [
      [dst, dstOffset, 'dst'],
      [src, srcOffset, 'src'],
    ] as const) {
      if (off + count > t.numel) {
        throw new InvalidArgumentError(`copyRanges(): range ${i}: ${name} elements [${off}, ${off + count}) are outside ${t}, which has ${t.numel}.`, {
          range: i,
          argument: name,
        });
      }
    }
    const es = dtypeSize(dst.dtype);
    const db = dst.byteOffset + dstOffset * es,
      sb = src.byteOffset + srcOffset * es,
      nb = count * es;
    if (dst.buffer === src.buffer && nb > 0 && db < sb + nb && sb < db + nb) {
      throw new InvalidArgumentError(
        `copyRanges(): range ${i}: src bytes [${sb}, ${sb + nb}) and dst bytes [${db}, ${db + nb}) overlap in one buffer. HINT: a range must not copy onto itself; use copy() to shift bytes.`,
        { range: i },
      );
    }
    this.#device = device;
    if ((i + 1) * FIELDS > this.#ranges.length) {
      const grown = new Float64Array(this.#ranges.length * 2);
      grown.set(this.#ranges);
      this.#ranges = grown;
    }
    const r = this.#ranges,
      o = i * FIELDS;
    r[o] = this.#bufferIndex(dst.buffer);
    r[o + 1] = db;
    r[o + 2] = this.#bufferIndex(src.buffer);
    r[o + 3] = sb;
    r[o + 4] = nb;
    this.#count = i + 1;
    return this;
  }

  /** Enqueues every range added as one op on `stream` (nothing when the list is empty) and empties the list. */
  enqueue(stream: Stream): void {
    if (this.#count === 0) return;
    if (stream.device.ordinal !== this.#device) {
      throw new InvalidArgumentError(`copyRanges(): the ranges are on device ${this.#device} but the stream belongs to device ${stream.device.ordinal}.`, {
        expectedDevice: this.#device,
        streamDevice: stream.device.ordinal,
      });
    }
    const ranges = this.#ranges.subarray(0, this.#count * FIELDS);
    const buffers = this.#buffers.slice();
    this.#buffers.length = 0;
    this.#count = 0;
    this.#device = -1;
    stream.native.copyRanges(buffers, ranges, 0);
  }

  /**
   * The ranges added since the last enqueue, taken out of the list (which is left empty), for a
   * CopyPlan: `ranges` index into `buffers` as the native op's do; `device` is -1 when empty.
   */
  take(): { buffers: DeviceBuffer[]; ranges: Float64Array; device: number } {
    const out = { buffers: this.#buffers.slice(), ranges: this.#ranges.slice(0, this.#count * FIELDS), device: this.#device };
    this.#buffers.length = 0;
    this.#count = 0;
    this.#device = -1;
    return out;
  }

  #bufferIndex(b: DeviceBuffer): number {
    // Lists touch a handful of buffers: a scan beats a Map.
    const at = this.#buffers.indexOf(b);
    if (at >= 0) return at;
    this.#buffers.push(b);
    return this.#buffers.length - 1;
  }
}

/**
 * One list that lives as long as the module. Lists are short-lived (one per packing loop), and the
 * maps their fields add to the class's initial map are held only by live instances: a GC when no
 * list was alive freed them and deoptimised every optimised add() / enqueue() ("weak objects"),
 * to be optimised again steps later. This instance keeps those maps alive.
 */
export const KEEP_LIST_MAPS = new CopyRanges();
