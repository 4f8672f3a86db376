/**
 * The single-device strategy: the whole model on one device (ParamStore). It is the
 * reference the sharded strategies are checked against, and the 1-rank row of the
 * trainer benchmark.
 */
import { Tensor, type Device } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import { patchImpl } from '../runtime/patches.js';
import { Tape } from '../model/autograd.js';
import type { ModelConfig } from '../model/config.js';
import { ParamStore, type AdamWHyper, type HostParam } from '../model/param-store.js';
import { uploadBatch } from '../model/qwen3.js';
import { createModel, type CausalLM } from '../model/create-model.js';
import { paramSpecs } from '../model/params.js';
import { Replicate } from '../parallel/placement.js';
import type { WeightSource } from '../parallel/weight-sources.js';
import { adapterSourcesOf, type AdapterSources } from '../parallel/adapter-sources.js';
import { LoraAdapters, loraStepSeed, type LoraHooks } from '../model/lora.js';
import type { LoraConfigInput } from '../model/lora-config.js';
import { clipCoefficient, scaleInPlace, sumSquares } from './grad-norm.js';
import { crossEntropyLoss, localRows, stepLoss, trimsExactly } from './rows.js';
import { addRouterAux, tapRouters } from './router-aux-step.js';
import type { FullState, LossFn, StateKind, StepLoss, TrainBatch, TrainStrategy } from './strategy.js';
import { bf16ComputeNames, checkTrainerDtype, ComputeCopies, type TrainerDtype } from './mixed-precision.js';

/** LoRA on the single-device path: only the adapters train; base weights stay frozen. */
export interface SingleLoraOptions {
  config: LoraConfigInput;
  /** Adapter parameters by name (default: PEFT init from config.seed). */
  params?: ReadonlyMap<string, HostParam>;
}

export class SingleDeviceStrategy implements TrainStrategy {
  readonly kind = 'single' as const;
  readonly layout = 'single';
  readonly ranks = 1;
  readonly model: CausalLM;
  /** The LoRA adapters (and their hooks) when created with `lora`. */
  readonly lora: { adapters: LoraAdapters; hooks: LoraHooks } | undefined;
  /** forwardBackward calls since the last optimizer step (the dropout seed's micro-batch index). */
  private micro = 0;
  /** bfloat16: the matmul weights' bf16 compute copies (the store keeps the fp32 masters). */
  readonly compute: ComputeCopies | null;

  private constructor(
    readonly cfg: ModelConfig,
    readonly device: Device,
    readonly store: ParamStore,
    lora: SingleLoraOptions | undefined,
    readonly dtype: TrainerDtype,
  ) {
    const compute = dtype === 'bfloat16' ? new ComputeCopies(device, (name) => store.get(name), bf16ComputeNames(cfg)) : null;
    this.compute = compute;
    const lookup = compute ? (name: string) => compute.param(name, device.defaultStream) : (name: string) => store.get(name);
    if (lora) {
      const adapters = new LoraAdapters(cfg, lora.config);
      adapters.attach(store, device.defaultStream, lora.params);
      this.lora = { adapters, hooks: adapters.hooks((_tape, name) => lookup(name)) };
    }
    this.model = createModel(cfg, compute ? { param: (_tape, name) => lookup(name) } : store, this.lora?.hooks);
  }

  /**
   * `opts.lora` adds LoRA adapters (HF-PEFT names, in gatherState / loadState too) and
   * freezes the base weights; dropout masks are seeded per forward from (config.seed,
   * optimizer step, micro-batch index), so a resumed run reproduces them. `opts.dtype`
   * 'bfloat16' trains in mixed precision (mixed-precision.ts): the store keeps the fp32
   * masters, the forward reads bf16 copies of the matmul weights cast once per optimizer step.
   */
  static create(
    cfg: ModelConfig,
    device: Device,
    params: ReadonlyMap<string, HostParam>,
    opts: { lora?: SingleLoraOptions; dtype?: TrainerDtype } = {},
  ): SingleDeviceStrategy {
    const dtype = checkTrainerDtype(opts.dtype, 'SingleDeviceStrategy.create() option dtype');
    const store = ParamStore.fromHost(cfg, device, params, device.defaultStream);
    try {
      return new SingleDeviceStrategy(cfg, device, store, opts.lora, dtype);
    } catch (e) {
      store.release();
      throw e;
    }
  }

  get optimizerSteps(): number {
    return this.store.stepCount;
  }

  private get stream() {
    return this.device.defaultStream;
  }

  forwardBackward(batch: TrainBatch, loss: LossFn = crossEntropyLoss): Promise<StepLoss> {
    return this.pass(batch, loss, true);
  }

  /** Eval-mode forward and loss (no dropout, no backward, gradients untouched). */
  forward(batch: TrainBatch, loss: LossFn = crossEntropyLoss): Promise<StepLoss> {
    return this.pass(batch, loss, false);
  }

  private async pass(batch: TrainBatch, loss: LossFn, backward: boolean): Promise<StepLoss> {
    const rows = localRows(batch, 1, 0, trimsExactly(this.cfg));
    const { stream, device } = this;
    const tape = new Tape({ stream, impl: patchImpl });
    if (this.compute?.stale) this.compute.refresh(stream);
    if (this.lora) {
      this.lora.hooks.dropoutSeed = backward ? loraStepSeed(this.lora.adapters.config.seed, this.store.stepCount, this.micro++) : null;
      // The masks of the untrimmed batch's token rows, so the trim (rows.ts) does not change them.
      this.lora.hooks.dropoutWindow = { row0: 0, total: batch.batch * batch.seqLen, seq: { global: batch.seqLen, local: rows.seqLen } };
    }
    try {
      const b = uploadBatch(rows.inputIds, rows.rows, rows.seqLen, device, stream, rows.attentionMask);
      for (const t of [b.ids, b.positions, b.mask]) if (t) tape.own(t);
      tapRouters(tape, this.cfg);
      const logits = this.model.forward(tape, b);
      const { terms, roots } = await addRouterAux(tape, this.cfg, rows, await loss(tape, logits, rows, batch));
      const { perToken, weights } = terms;
      if (backward) tape.backward(perToken, tape.own(Tensor.fromArray(device, weights, [weights.length], { stream })), roots);
      return await stepLoss(terms, stream);
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
    if (this.compute) this.compute.stale = true;
    this.micro = 0;
  }

  async gatherState(kind: StateKind): Promise<Map<string, HostParam>> {
    return this.store.hostState(kind, this.stream);
  }

  /** The LoRA adapter parameters alone, by PEFT name (what an adapter-only weight sync sends). */
  async loraState(): Promise<Map<string, HostParam>> {
    if (!this.lora)
      throw new InvalidArgumentError(
        "SingleDeviceStrategy.loraState(): this strategy has no LoRA adapters. HINT: create it with the `lora` option, or use gatherState('params') for the full weights.",
      );
    const out = new Map<string, HostParam>();
    for (const name of this.lora.adapters.names) {
      const t = this.store.get(name).value;
      out.set(name, { shape: [...t.shape], data: (await t.toArray({ stream: this.stream })) as Float32Array });
    }
    return out;
  }

  /** The LoRA adapters in the weight-source contract (null without LoRA): what an adapter-only weight sync reads. */
  adapterSources(): AdapterSources | null {
    return this.lora ? adapterSourcesOf(this.layout, this.lora.adapters, () => this.loraState()) : null;
  }

  /** Every model tensor whole on this device (LoRA adapters are not model weights). */
  weightSources(): WeightSource[] {
    return paramSpecs(this.cfg, { expertLayout: 'fused' }).map((spec) => {
      const t = this.store.get(spec.name).value;
      return {
        key: spec.name,
        shape: [...spec.shape],
        placement: Replicate(),
        parts: 1,
        part: 0,
        localNumel: t.numel,
        map: { kind: 'identity', hf: spec.name },
        owner: true,
        comm: null,
        local: t.reshape([t.numel]),
      };
    });
  }

  async loadState(state: FullState): Promise<void> {
    this.store.loadHost(state, this.stream);
    if (this.compute) this.compute.stale = true;
    this.micro = 0;
    await this.stream.synchronize();
  }

  release(): void {
    this.compute?.release();
    this.store.release();
  }
}
