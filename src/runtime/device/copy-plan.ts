/**
 * A copyRanges list built once and enqueued many times, each time between other tensors of
 * the same roles: a packing loop whose ranges depend only on a fixed layout (FSDP2's unpack of
 * a unit's all-gather: dp ranges per parameter, the same every step, between whichever two
 * pool slots the gather got) pays for building and checking its ranges once, not per call.
 *
 * The plan is built from a CopyRanges filled (and checked range by range) against template
 * tensors, one per role; every range must lie inside its role's tensor. Byte offsets are kept
 * relative to the role's tensor, so enqueue() may bind any tensors with at least as many bytes,
 * on the stream's device, one distinct buffer per role (as the templates had). Semantics are
 * copyRanges' (native/copy_ranges_op.cc): the ranges run in order, each a memcpy, bitwise the
 * list the same add() calls against the bound tensors would make.
 */
import { InvalidArgumentError } from '../errors.js';
import type { CopyRanges } from './copy-ranges.js';
import type { DeviceBuffer } from './device.js';
import type { Stream } from './stream.js';
import { Tensor } from './tensor.js';

const FIELDS = 5;

function roleTensor(t: unknown, what: string, role: number): Tensor {
  if (!(t instanceof Tensor)) throw new InvalidArgumentError(`CopyPlan: ${what} ${role} must be a Tensor.`, { role });
  t.checkLive(`${what} ${role}`);
  if (!t.isContiguous) throw new InvalidArgumentError(`CopyPlan: ${what} ${role} (${t}) must be contiguous.`, { role });
  return t;
}

export class CopyPlan {
  /** The ranges, buffer fields as role indices, byte offsets relative to the role's tensor. */
  readonly #ranges: Float64Array;
  /** Bytes each role's tensor must hold: the furthest end of its ranges. */
  readonly #need: number[];
  readonly #device: number;
  #shifted: Float64Array | null = null;

  private constructor(ranges: Float64Array, need: number[], device: number) {
    this.#ranges = ranges;
    this.#need = need;
    this.#device = device;
  }

  /**
   * Takes every range of `list` (leaving it empty) into a plan whose roles are `roles`, in the
   * order enqueue() binds them. Each range's buffers must be those of role tensors (distinct
   * buffers), and its bytes must lie inside that tensor.
   */
  static from(list: CopyRanges, roles: readonly Tensor[]): CopyPlan {
    const { buffers, ranges, device } = list.take();
    const ts = roles.map((t, i) => roleTensor(t, 'role', i));
    for (let i = 0; i < ts.length; i++) {
      for (let j = 0; j < i; j++) {
        if (ts[i]!.buffer === ts[j]!.buffer) throw new InvalidArgumentError(`CopyPlan.from(): roles ${j} and ${i} share a buffer; each role needs its own.`);
      }
    }
    const roleOf = buffers.map((b: DeviceBuffer) => {
      const r = ts.findIndex((t) => t.buffer === b);
      if (r < 0) throw new InvalidArgumentError(`CopyPlan.from(): a range touches buffer ${b.id}, which is not the buffer of any role tensor.`);
      return r;
    });
    const need = ts.map(() => 0);
    for (let o = 0; o < ranges.length; o += FIELDS) {
      const nb = ranges[o + 4]!;
      for (const f of [0, 2]) {
        const role = roleOf[ranges[o + f]!]!;
        const t = ts[role]!;
        const rel = ranges[o + f + 1]! - t.byteOffset;
        if (rel < 0 || rel + nb > t.nbytes) {
          throw new InvalidArgumentError(
            `CopyPlan.from(): range ${o / FIELDS}: bytes [${rel}, ${rel + nb}) relative to role ${role} lie outside its ${t.nbytes} bytes.`,
            { range: o / FIELDS, role },
          );
        }
        ranges[o + f] = role;
        ranges[o + f + 1] = rel;
        need[role] = Math.max(need[role]!, rel + nb);
      }
    }
    return new CopyPlan(ranges, need, device);
  }

  /** Ranges in the plan. */
  get length(): number {
    return this.#ranges.length / FIELDS;
  }

  /** Enqueues the plan's ranges as ONE copyRanges op on `stream`, role i bound to `tensors[i]` (nothing for an empty plan). */
  enqueue(stream: Stream, tensors: readonly Tensor[]): void {
    if (tensors.length !== this.#need.length) {
      throw new InvalidArgumentError(`CopyPlan.enqueue(): the plan has ${this.#need.length} roles but ${tensors.length} tensors were given.`);
    }
    if (this.#ranges.length === 0) return;
    const sd = stream.device.ordinal;
    if (sd !== this.#device) {
      throw new InvalidArgumentError(`CopyPlan.enqueue(): the plan's ranges are on device ${this.#device} but the stream belongs to device ${sd}.`, {
        expectedDevice: this.#device,
        streamDevice: sd,
      });
    }
    const buffers: DeviceBuffer[] = [];
    let shift = false;
    for (let i = 0; i < tensors.length; i++) {
      const t = roleTensor(tensors[i], 'tensor', i);
      if (t.device.ordinal !== sd) {
        throw new InvalidArgumentError(`CopyPlan.enqueue(): tensor ${i} is on device ${t.device.ordinal} but the stream belongs to device ${sd}.`, { role: i });
      }
      if (t.nbytes < this.#need[i]!) {
        throw new InvalidArgumentError(`CopyPlan.enqueue(): tensor ${i} has ${t.nbytes} bytes but the plan's ranges need ${this.#need[i]} of role ${i}.`, {
          role: i,
        });
      }
      if (buffers.includes(t.buffer))
        throw new InvalidArgumentError(`CopyPlan.enqueue(): tensor ${i} shares its buffer with an earlier one; each role needs its own.`);
      buffers.push(t.buffer);
      shift ||= t.byteOffset !== 0;
    }
    stream.native.copyRanges(buffers, shift ? this.#shift(tensors) : this.#ranges, 0);
  }

  /** The ranges with each byte offset moved to its bound tensor's (slots start at 0 and skip this). */
  #shift(tensors: readonly Tensor[]): Float64Array {
    const out = (this.#shifted ??= new Float64Array(this.#ranges.length));
    out.set(this.#ranges);
    for (let o = 0; o < out.length; o += FIELDS) {
      out[o + 1]! += tensors[out[o]!]!.byteOffset;
      out[o + 3]! += tensors[out[o + 2]!]!.byteOffset;
    }
    return out;
  }
}
