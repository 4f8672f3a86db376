/**
 * Supervised training of the Qwen3-style model on one device (the synthetic
 * digit-reversal task): forward, per-token cross-entropy averaged over answer
 * tokens, backward, AdamW. One host sync per step when the loss is read.
 */
import { Tensor, type Device, type Stream } from '../runtime/device/device-index.js';
import { patchImpl } from '../runtime/patches.js';
import { Tape } from '../model/autograd.js';
import type { ModelConfig } from '../model/config.js';
import * as F from '../model/functional.js';
import { ParamStore, type AdamWHyper } from '../model/param-store.js';
import { initialParams } from '../model/params.js';
import { Qwen3Model, uploadBatch } from '../model/qwen3.js';
import { makeBatch } from '../data/synthetic-task.js';
import { addRouterAux, AUX_LOSS_STAT, tapRouters } from '../train/router-aux-step.js';

export interface StepResult {
  /** Mean cross-entropy over answer tokens, plus coef · aux with the router aux loss (only when `readLoss`). */
  loss?: number;
  tokens: number;
  /** The router load-balancing loss, when the model config asks for it (output_router_logits). */
  auxLoss?: number;
}

export class SupervisedTrainer {
  readonly model: Qwen3Model;
  readonly stream: Stream;

  constructor(
    readonly cfg: ModelConfig,
    readonly device: Device,
    readonly params: ParamStore,
    readonly hp: AdamWHyper,
  ) {
    this.stream = params.device.defaultStream;
    this.model = new Qwen3Model(cfg, params);
  }

  static create(cfg: ModelConfig, device: Device, seed: number, hp: AdamWHyper): SupervisedTrainer {
    const stream = device.defaultStream;
    return new SupervisedTrainer(cfg, device, ParamStore.fromHost(cfg, device, initialParams(cfg, seed), stream), hp);
  }

  /**
   * Forward + backward of one batch; gradients accumulate into the parameters'
   * grad buffers. Returns the per-token loss tensor's mean when `readLoss`.
   */
  async forwardBackward(inputIds: Int32Array, targets: Int32Array, batch: number, seqLen: number, readLoss: boolean): Promise<StepResult> {
    const { stream, device } = this;
    const tape = new Tape({ stream, impl: patchImpl });
    try {
      const b = uploadBatch(inputIds, batch, seqLen, device, stream);
      tape.own(b.ids);
      tape.own(b.positions);
      const tgt = tape.own(Tensor.fromArray(device, targets, [targets.length], { stream }));
      tapRouters(tape, this.cfg);
      const logits = this.model.forward(tape, b);
      const loss = F.crossEntropy(tape, logits, tgt);
      let tokens = 0;
      for (const t of targets) if (t !== -100) tokens++;
      // d(mean loss)/d(token loss) = 1/tokens on answer tokens (ignored rows get 0 in the kernel).
      const weights = new Float32Array(targets.length).fill(tokens ? 1 / tokens : 0);
      const rows = { row0: 0, rows: batch, seqLen, inputIds, targets };
      const aux = await addRouterAux(tape, this.cfg, rows, { perToken: loss, weights });
      tape.backward(loss, tape.own(Tensor.fromArray(device, weights, [targets.length], { stream })), aux.roots);
      const auxLoss = aux.terms.stats?.[AUX_LOSS_STAT];
      if (auxLoss !== undefined) return { ...(readLoss ? { loss: aux.terms.value! } : {}), tokens, auxLoss };
      if (!readLoss) return { tokens };
      const perToken = (await loss.value.toArray({ stream })) as Float32Array;
      let sum = 0;
      for (const v of perToken) sum += v;
      return { loss: tokens ? sum / tokens : 0, tokens };
    } finally {
      tape.release();
    }
  }

  /** One optimizer step on a synthetic batch (`lr` overrides the base rate, for schedules). */
  async step(seed: number, step: number, batch: number, seqLen: number, readLoss = true, lr = this.hp.lr): Promise<StepResult> {
    const data = makeBatch(seed * 100_003 + step, batch, seqLen);
    this.params.zeroGrad(this.stream);
    const r = await this.forwardBackward(data.inputIds, data.targets, batch, seqLen, readLoss);
    this.params.adamw({ ...this.hp, lr }, this.stream);
    return r;
  }
}

/** Linear warm-up then cosine decay to `minRatio` of the peak (nanoGPT's schedule). */
export function cosineLr(step: number, total: number, peak: number, warmup: number, minRatio = 0.1): number {
  if (step < warmup) return (peak * (step + 1)) / warmup;
  const progress = Math.min(1, (step - warmup) / Math.max(1, total - warmup));
  return peak * (minRatio + (1 - minRatio) * 0.5 * (1 + Math.cos(Math.PI * progress)));
}
