/**
 * The single-device strategy: the whole model on one device (ParamStore). It is the
 * reference the sharded strategies are checked against, and the 1-rank row of the
 * trainer benchmark.
 */
import { Tensor, type Device } from '../runtime/device-index.js';
import { patchImpl } from '../runtime/patches.js';
import { Tape } from '../model/autograd.js';
import type { ModelConfig } from '../model/config.js';
import { ParamStore, type AdamWHyper, type HostParam } from '../model/param-store.js';
import { Qwen3Model, uploadBatch } from '../model/qwen3.js';
import { clipCoefficient, scaleInPlace, sumSquares } from './grad-norm.js';
import { crossEntropyLoss, localRows, weightedSum, weightedTokens } from './rows.js';
import type { FullState, LossFn, StateKind, StepLoss, TrainBatch, TrainStrategy } from './strategy.js';

export class SingleDeviceStrategy implements TrainStrategy {
  readonly kind = 'single' as const;
  readonly layout = 'single';
  readonly ranks = 1;
  readonly model: Qwen3Model;

  private constructor(
    readonly cfg: ModelConfig,
    readonly device: Device,
    readonly store: ParamStore,
  ) {
    this.model = new Qwen3Model(cfg, store);
  }

  static create(cfg: ModelConfig, device: Device, params: ReadonlyMap<string, HostParam>): SingleDeviceStrategy {
    return new SingleDeviceStrategy(cfg, device, ParamStore.fromHost(cfg, device, params, device.defaultStream));
  }

  get optimizerSteps(): number {
    return this.store.stepCount;
  }

  private get stream() {
    return this.device.defaultStream;
  }

  async forwardBackward(batch: TrainBatch, loss: LossFn = crossEntropyLoss): Promise<StepLoss> {
    const rows = localRows(batch, 1, 0);
    const { stream, device } = this;
    const tape = new Tape({ stream, impl: patchImpl });
    try {
      const b = uploadBatch(rows.inputIds, rows.rows, rows.seqLen, device, stream);
      tape.own(b.ids);
      tape.own(b.positions);
      const logits = this.model.forward(tape, b);
      const terms = await loss(tape, logits, rows, batch);
      const { perToken, weights } = terms;
      tape.backward(perToken, tape.own(Tensor.fromArray(device, weights, [weights.length], { stream })));
      const value = terms.value ?? weightedSum((await perToken.value.toArray({ stream })) as Float32Array, weights);
      return { loss: value, tokens: weightedTokens(weights), ...(terms.stats ? { stats: { ...terms.stats } } : {}) };
    } finally {
      tape.release();
    }
  }

  zeroGrad(): void {
    this.store.zeroGrad(this.stream);
  }

  async clipGradNorm(maxNorm: number | null): Promise<number> {
    const grads = [...this.store.vars.values()].flatMap((v) => (v.grad ? [v.grad] : []));
    const ss = sumSquares(grads, this.stream);
    if (!ss) return 0;
    const norm = Math.sqrt(((await ss.toArray({ stream: this.stream })) as Float32Array)[0]!);
    ss.release();
    const coef = clipCoefficient(norm, maxNorm);
    for (const g of grads) scaleInPlace(g, coef, this.stream);
    return norm;
  }

  optimizerStep(hp: AdamWHyper): void {
    this.store.adamw(hp, this.stream);
  }

  async gatherState(kind: StateKind): Promise<Map<string, HostParam>> {
    return this.store.hostState(kind, this.stream);
  }

  async loadState(state: FullState): Promise<void> {
    this.store.loadHost(state, this.stream);
    await this.stream.synchronize();
  }

  release(): void {
    this.store.release();
  }
}
