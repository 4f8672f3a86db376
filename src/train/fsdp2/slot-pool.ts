/**
 * Fixed-size device buffers ("slots") reused in stream order for FSDP2's transient
 * full-size tensors (all-gather staging, unsharded parameters, unsharded gradients,
 * reduce-scatter input).
 *
 * Why: device memory returns to the pool only when the ops using it have RUN, and the
 * host enqueues a whole forward + backward long before the stream catches up; freeing
 * each gathered block would then still let every block's memory be allocated at once.
 * Every user of a slot enqueues on the one stream the pool was made for, so a slot
 * given back can be handed out again at once: the next user's writes run after the
 * previous user's reads (FIFO), like a stream-ordered caching allocator. Peak memory
 * is therefore (slots in use at once) x (slot size), whatever the host/stream lag.
 */
import { Tensor, type Device } from '../../runtime/device/device-index.js';
import { InvalidArgumentError } from '../../runtime/errors.js';

export class SlotPool {
  private readonly free: Tensor[] = [];
  private readonly all: Tensor[] = [];

  constructor(
    readonly device: Device,
    /** fp32 elements per slot. */
    readonly slotNumel: number,
  ) {}

  /** A slot (fp32 [slotNumel]); contents undefined. Give it back with `give()`. */
  take(): Tensor {
    const t = this.free.pop();
    if (t) return t;
    const fresh = Tensor.empty(this.device, [this.slotNumel], 'fp32');
    this.all.push(fresh);
    return fresh;
  }

  /** Returns a slot; only work enqueued later on the pool's stream may reuse it. */
  give(t: Tensor): void {
    if (!this.all.includes(t)) throw new InvalidArgumentError('SlotPool.give(): this tensor is not a slot of this pool.');
    if (this.free.includes(t)) throw new InvalidArgumentError('SlotPool.give(): this slot was already given back.');
    this.free.push(t);
  }

  /** Slots allocated so far (the pool's high-water mark). */
  get allocated(): number {
    return this.all.length;
  }

  /** Frees every slot (stream-ordered: pending ops on them complete first). */
  dispose(): void {
    for (const t of this.all) if (!t.released) t.release();
    this.all.length = 0;
    this.free.length = 0;
  }
}
