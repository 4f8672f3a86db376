/**
 * The rollout engine's KV cache on one TP rank: per layer a key and a value tensor
 * [maxBatch, maxSeqLen, nKV_tp, D] (the layout K.attentionDecode reads), allocated once
 * and reused by every generate() call. Row b of a batch uses cache row b; its valid
 * length is tracked on the host (positions are known without reading the device); a step's
 * keys and values of every row go in with one kernel per layer at positions the engine
 * uploaded for the step (K.kvCacheWrite). Sleep offloads it to the
 * host (level 1) or drops it (level 2); wake allocates it again.
 */
import { Tensor, type Device, type Stream } from '../runtime/device/device-index.js';
import { copy } from '../runtime/device/ops.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import * as K from '../model/kernels/index.js';

export interface KvCacheShape {
  layers: number;
  maxBatch: number;
  maxSeqLen: number;
  kvHeads: number;
  headDim: number;
}

export class KvCache {
  private k: Tensor[] = [];
  private v: Tensor[] = [];
  private host: Uint8Array[] | null = null;

  constructor(
    readonly device: Device,
    readonly shape: KvCacheShape,
  ) {
    this.allocate();
  }

  get allocated(): boolean {
    return this.k.length > 0;
  }

  /** Bytes one layer's key (or value) tensor takes. */
  private get layerBytes(): number {
    const s = this.shape;
    return s.maxBatch * s.maxSeqLen * s.kvHeads * s.headDim * 4;
  }

  deviceBytes(): number {
    return this.allocated ? 2 * this.shape.layers * this.layerBytes : 0;
  }

  private allocate(): void {
    const s = this.shape;
    for (let l = 0; l < s.layers; l++) {
      this.k.push(Tensor.empty(this.device, [s.maxBatch, s.maxSeqLen, s.kvHeads, s.headDim]));
      this.v.push(Tensor.empty(this.device, [s.maxBatch, s.maxSeqLen, s.kvHeads, s.headDim]));
    }
  }

  /** Checks a batch fits: `batch` rows, each needing up to `seqLen` positions. */
  checkFits(batch: number, seqLen: number): void {
    const s = this.shape;
    if (batch > s.maxBatch)
      throw new InvalidArgumentError(
        `A batch of ${batch} sequences exceeds the KV cache's maxBatch ${s.maxBatch}. HINT: raise maxBatch when creating the engine, or split the batch.`,
        { batch, maxBatch: s.maxBatch },
      );
    if (seqLen > s.maxSeqLen) {
      throw new InvalidArgumentError(
        `Prompt plus maxTokens needs ${seqLen} positions but the KV cache holds ${s.maxSeqLen}. HINT: lower maxTokens or raise maxSeqLen.`,
        { seqLen, maxSeqLen: s.maxSeqLen },
      );
    }
  }

  /** Cache views [batch, maxSeqLen, nKV, D] of layer `l` for the first `batch` rows. */
  views(l: number, batch: number): { k: Tensor; v: Tensor } {
    const s = this.shape;
    const shape = [batch, s.maxSeqLen, s.kvHeads, s.headDim];
    const kt = this.k[l]!,
      vt = this.v[l]!;
    return {
      k: new Tensor(kt.device, kt.buffer, 'fp32', shape, undefined, kt.byteOffset),
      v: new Tensor(vt.device, vt.buffer, 'fp32', shape, undefined, vt.byteOffset),
    };
  }

  /**
   * Writes positions [pos[b], pos[b] + count) of row b from k / v [batch·count, nKV·D] (or any
   * shape of that size) for each row b < batch = pos.numel: one kvCacheWrite op for both (not one
   * copy per row). pos is an int32 device tensor [batch], checked when the op runs: a position
   * that leaves no room for `count` fails the stream and writes nothing.
   */
  write(l: number, k: Tensor, v: Tensor, pos: Tensor, count: number, stream: Stream): void {
    const s = this.shape;
    const B = pos.numel;
    const c = this.views(l, B);
    const shape = [B, count, s.kvHeads, s.headDim];
    K.kvCacheWrite(c.k, c.v, k.reshape(shape), v.reshape(shape), pos, { stream });
  }

  /** Level 1: contents to the host, device memory freed. Level 2: dropped. */
  async sleep(level: 1 | 2, stream: Stream, timeoutMs?: number): Promise<void> {
    if (level === 1) {
      this.host = [];
      for (let l = 0; l < this.shape.layers; l++)
        this.host.push(await this.k[l]!.toBytes({ stream, timeoutMs }), await this.v[l]!.toBytes({ stream, timeoutMs }));
    }
    for (const t of [...this.k, ...this.v]) t.release();
    this.k = [];
    this.v = [];
  }

  /** Allocates again; restores the offloaded contents after a level-1 sleep. */
  wake(stream: Stream): void {
    this.allocate();
    if (this.host) {
      for (let l = 0; l < this.shape.layers; l++) {
        for (const [i, t] of [
          [2 * l, this.k[l]!],
          [2 * l + 1, this.v[l]!],
        ] as const) {
          const tmp = Tensor.fromArray(this.device, this.host[i]!, [this.host[i]!.length], { dtype: 'uint8', stream });
          copy(new Tensor(t.device, t.buffer, 'uint8', [t.numel * 4], undefined, t.byteOffset), tmp, { stream });
          tmp.release();
        }
      }
      this.host = null;
    }
  }

  release(): void {
    for (const t of [...this.k, ...this.v]) t.release();
    this.k = [];
    this.v = [];
  }
}
