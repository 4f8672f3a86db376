/**
 * The rollout engine's Gated DeltaNet state cache, beside the KV cache (kv-cache.ts): per
 * GDN layer a conv state [maxBatch, C, K - 1] (the last K - 1 inputs of the causal conv,
 * oldest first, the layout K.causalConv1d takes) and a recurrent state
 * [maxBatch, Hv, Dk, Dv] (the layout K.gatedDeltaRule takes) — on a TP rank, of its own
 * heads only (its q ‖ k ‖ v channels and value heads, gdn-shard.ts) — allocated once and reused by
 * every generate() call. Row b of a batch uses cache row b. Prefill writes each row's state
 * at its own last real token; every decode step replaces it by the step's state out. Where
 * the KV cache grows with the sequence, this state is fixed-size: it IS the past of a GDN
 * layer. Sleep offloads it to the host (level 1) or drops it (level 2); wake allocates it again.
 */
import { Tensor, type Device, type Stream } from '../runtime/device/device-index.js';
import { copy } from '../runtime/device/ops.js';
import { viewOf } from '../runtime/device/views.js';

export interface GdnStateShape {
  /** GDN layers (the cache's own numbering, see qwen35-layout.ts). */
  layers: number;
  maxBatch: number;
  /** Conv channels (q ‖ k ‖ v) and taps. */
  channels: number;
  kernel: number;
  valueHeads: number;
  keyHeadDim: number;
  valueHeadDim: number;
}

export class GdnStateCache {
  private conv: Tensor[] = [];
  private rec: Tensor[] = [];
  private host: Uint8Array[] | null = null;

  constructor(
    readonly device: Device,
    readonly shape: GdnStateShape,
  ) {
    this.allocate();
  }

  get allocated(): boolean {
    return this.conv.length > 0;
  }

  private get convRow(): number {
    return this.shape.channels * (this.shape.kernel - 1);
  }

  private get recRow(): number {
    const s = this.shape;
    return s.valueHeads * s.keyHeadDim * s.valueHeadDim;
  }

  deviceBytes(): number {
    const s = this.shape;
    return this.allocated ? s.layers * s.maxBatch * (this.convRow + this.recRow) * 4 : 0;
  }

  private allocate(): void {
    const s = this.shape;
    for (let l = 0; l < s.layers; l++) {
      this.conv.push(Tensor.empty(this.device, [s.maxBatch, s.channels, s.kernel - 1]));
      this.rec.push(Tensor.empty(this.device, [s.maxBatch, s.valueHeads, s.keyHeadDim, s.valueHeadDim]));
    }
  }

  /** The states of GDN layer `l` for the first `batch` rows: conv [batch, C, K - 1], recurrent [batch, Hv, Dk, Dv]. */
  views(l: number, batch: number): { conv: Tensor; rec: Tensor } {
    const s = this.shape;
    return {
      conv: viewOf(this.conv[l]!, [batch, s.channels, s.kernel - 1]),
      rec: viewOf(this.rec[l]!, [batch, s.valueHeads, s.keyHeadDim, s.valueHeadDim]),
    };
  }

  /** Writes row `b`'s conv state from `state` [1, C, K - 1]. */
  writeConvRow(l: number, b: number, state: Tensor, stream: Stream): void {
    copy(viewOf(this.conv[l]!, [this.convRow], b * this.convRow), state.reshape([this.convRow]), { stream });
  }

  /** Replaces the first rows of layer `l` by `conv` [batch, C, K - 1] and / or `rec` [batch, Hv, Dk, Dv]. */
  write(l: number, states: { conv?: Tensor; rec?: Tensor }, stream: Stream): void {
    if (states.conv) copy(viewOf(this.conv[l]!, [states.conv.numel]), states.conv.reshape([states.conv.numel]), { stream });
    if (states.rec) copy(viewOf(this.rec[l]!, [states.rec.numel]), states.rec.reshape([states.rec.numel]), { stream });
  }

  /** Level 1: contents to the host, device memory freed. Level 2: dropped. */
  async sleep(level: 1 | 2, stream: Stream, timeoutMs?: number): Promise<void> {
    if (level === 1) {
      this.host = [];
      for (let l = 0; l < this.shape.layers; l++)
        this.host.push(await this.conv[l]!.toBytes({ stream, timeoutMs }), await this.rec[l]!.toBytes({ stream, timeoutMs }));
    }
    this.release();
  }

  /** Allocates again; restores the offloaded contents after a level-1 sleep. */
  wake(stream: Stream): void {
    this.allocate();
    if (!this.host) return;
    for (let l = 0; l < this.shape.layers; l++) {
      for (const [i, t] of [
        [2 * l, this.conv[l]!],
        [2 * l + 1, this.rec[l]!],
      ] as const) {
        const tmp = Tensor.fromArray(this.device, this.host[i]!, [this.host[i]!.length], { dtype: 'uint8', stream });
        copy(new Tensor(t.device, t.buffer, 'uint8', [t.numel * 4], undefined, t.byteOffset), tmp, { stream });
        tmp.release();
      }
    }
    this.host = null;
  }

  release(): void {
    for (const t of [...this.conv, ...this.rec]) t.release();
    this.conv = [];
    this.rec = [];
  }
}
