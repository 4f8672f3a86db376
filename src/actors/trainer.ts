/**
 * The trainer actor: one per trainer rank, driven by a single controller (verl/Ray
 * style). The controller calls the same method on every trainer rank (ActorMesh
 * `call`) with the same arguments; the calls are collective over the trainer group.
 *
 *   const trainers = await world.spawn<TrainerActor>({ module: 'ascent/actors/trainer', export: 'TrainerActor', args: [config] });
 *   await trainers.call('setup');
 *   const [r] = await trainers.call('trainStep', batch);
 *
 * `setup()` forms the trainer group from the world (`ranks` in the constructor
 * options; by default every rank) with one world-wide `comm.split`, so every world
 * rank — trainer or not — must take part in that split once, in the same order as
 * its other splits (the GRPO driver runs the trainer's and the engine's setups
 * together).
 */
import { exportHfModel, type SaveDtype } from '../train/hf-export.js';
import type { Communicator } from '../runtime/comm/comm.js';
import { InvalidArgumentError, InvalidStateError } from '../runtime/errors.js';
import type { RankContext } from '../runtime/actor-system/rank-context.js';
import type { HostParam } from '../model/param-store.js';
import { rowLogprobs, type RowLogprobs } from '../train/logprobs.js';
import { latestCheckpoint, loadCheckpoint, saveCheckpoint } from '../train/checkpoint.js';
import { lossByName } from '../train/loss-registry.js';
import { parseTrainerConfig, type TrainerConfig, type TrainerConfigInput } from '../train/config.js';
import { commMillis } from '../train/comm-time.js';
import { createStrategy } from '../train/factory.js';
import type { LossFn, StateKind, TrainBatch, TrainStrategy } from '../train/strategy.js';

export interface TrainStepResult {
  loss: number;
  tokens: number;
  /** The loss's stats summed over data-parallel ranks (GRPO: clipped tokens, KL, ...). */
  stats?: Record<string, number>;
  /** Global gradient norm before clipping. */
  gradNorm: number;
  lr: number;
  /** Optimizer steps taken so far. */
  step: number;
  ms: { forwardBackward: number; clip: number; optimizer: number; total: number; comm: number };
}

export class TrainerActor {
  readonly config: TrainerConfig;
  #strategy: TrainStrategy | null = null;
  #comm: Communicator | null = null;
  #ref: TrainStrategy | null = null;

  constructor(
    private readonly ctx: RankContext,
    config: TrainerConfigInput,
    private readonly ranks: readonly number[] | null = null,
  ) {
    this.config = parseTrainerConfig(config);
  }

  /** Collective over the world: splits off the trainer group and builds the strategy. */
  async setup(): Promise<{ rank: number; groupRank: number; layout: string }> {
    if (this.#strategy)
      throw new InvalidStateError(
        'TrainerActor.setup() was already called on this rank. HINT: set a trainer up once; make a new TrainerActor for another model.',
      );
    const { ctx } = this;
    const ranks = this.ranks ?? Array.from({ length: ctx.worldSize }, (_, i) => i);
    const comm = ranks.length === ctx.worldSize ? ctx.comm : await ctx.comm.split(ranks.includes(ctx.rank) ? 0 : null, ranks.indexOf(ctx.rank));
    if (!comm) throw new InvalidArgumentError(`TrainerActor on rank ${ctx.rank}: this rank is not in the trainer ranks [${ranks.join(', ')}].`);
    const strategy = await this.setupOn(comm);
    return { rank: ctx.rank, groupRank: comm.rank, layout: strategy.layout };
  }

  get strategy(): TrainStrategy {
    if (!this.#strategy) throw new InvalidStateError('The trainer is not set up. HINT: call setup() on every trainer rank first.');
    return this.#strategy;
  }

  /** zero grad → forward/backward → clip → AdamW, on the global batch. */
  trainStep(batch: TrainBatch, opts: { lr?: number; loss?: LossFn; measureComm?: boolean } = {}): Promise<TrainStepResult> {
    return this.#step([{ batch, ...(opts.loss ? { loss: opts.loss } : {}) }], opts);
  }

  /**
   * One optimizer step over several micro-batches (gradient accumulation): zero grad →
   * forward/backward of each, the gradients summed → clip → AdamW. Losses and stats are
   * summed over the micro-batches (each loss carries its share of the step's normalisation).
   */
  async #step(micro: ReadonlyArray<{ batch: TrainBatch; loss?: LossFn }>, opts: { lr?: number; measureComm?: boolean }): Promise<TrainStepResult> {
    if (micro.length === 0) throw new InvalidArgumentError('A training step needs at least one micro-batch.');
    const s = this.strategy;
    const lr = opts.lr ?? this.config.optimizer.lr;
    const wall0 = Date.now();
    const t0 = performance.now();
    s.zeroGrad();
    const r = { loss: 0, tokens: 0, stats: undefined as Record<string, number> | undefined };
    for (const m of micro) {
      const x = await s.forwardBackward(m.batch, m.loss);
      r.loss += x.loss;
      r.tokens += x.tokens;
      if (x.stats) {
        r.stats ??= {};
        for (const [k, v] of Object.entries(x.stats)) r.stats[k] = (r.stats[k] ?? 0) + v;
      }
    }
    const t1 = performance.now();
    const gradNorm = await s.clipGradNorm(this.config.clipGradNorm);
    const t2 = performance.now();
    s.optimizerStep({ ...this.config.optimizer, lr });
    await this.ctx.device.defaultStream.synchronize();
    const t3 = performance.now();
    const comm = opts.measureComm ? commMillis(s.communicators ?? [this.#comm!], wall0, Date.now()) : NaN;
    return {
      loss: r.loss,
      tokens: r.tokens,
      ...(r.stats ? { stats: r.stats } : {}),
      gradNorm,
      lr,
      step: s.optimizerSteps,
      ms: { forwardBackward: t1 - t0, clip: t2 - t1, optimizer: t3 - t2, total: t3 - t0, comm },
    };
  }

  /**
   * One optimizer step with a loss registered by name (src/train/loss-registry.ts), built on
   * this rank from `data` and `opts`; e.g. 'grpo', the clipped-surrogate loss src/grpo registers.
   */
  async lossStep(name: string, batch: TrainBatch, data: unknown, opts: { lr?: number } & Record<string, unknown> = {}): Promise<TrainStepResult> {
    return this.lossSteps(name, [{ batch, data }], opts);
  }

  /** lossStep() over micro-batches accumulated into one optimizer step (each with its own loss data). */
  async lossSteps(
    name: string,
    micro: ReadonlyArray<{ batch: TrainBatch; data: unknown }>,
    opts: { lr?: number } & Record<string, unknown> = {},
  ): Promise<TrainStepResult> {
    const build = lossByName(name);
    return this.#step(
      micro.map((m) => ({ batch: m.batch, loss: build(m.data, opts) })),
      { lr: opts.lr, measureComm: false },
    );
  }

  /**
   * Log-probs of the target tokens of `batch` under the current weights and
   * `temperature` (0 where the target is IGNORE_INDEX), for this rank's data-parallel
   * rows: the controller assembles the global [B·S] array from the ranks' pieces.
   */
  computeLogprobs(batch: TrainBatch, temperature = 1): Promise<RowLogprobs> {
    return rowLogprobs(this.strategy, batch, temperature);
  }

  /** Local setup on a trainer-group communicator the caller already formed (SPMD drivers). */
  async setupOn(comm: Communicator): Promise<TrainStrategy> {
    if (this.#strategy)
      throw new InvalidStateError(
        'TrainerActor.setup() was already called on this rank. HINT: set a trainer up once; make a new TrainerActor for another model.',
      );
    this.#comm = comm;
    this.#strategy = await createStrategy(this.config, { comm, device: this.ctx.device });
    return this.#strategy;
  }

  /**
   * Freezes a copy of the CURRENT policy as the reference for the KL term (collective
   * over the trainer group). Called when RL starts, i.e. after any supervised warm-up,
   * so the reference is the SFT model as in RLHF pipelines.
   */
  async setupReference(): Promise<void> {
    const params = await this.strategy.gatherState('params');
    this.#ref?.release();
    this.#ref = await createStrategy(this.config, { comm: this.#comm!, device: this.ctx.device });
    await this.#ref.loadState({ params });
  }

  /**
   * Moves the reference toward the current policy (TRL's sync_ref_model):
   * ref ← α·policy + (1 − α)·ref; α = 1 replaces it. Collective over the trainer group.
   */
  async refreshReference(alpha: number): Promise<void> {
    if (!(alpha > 0 && alpha <= 1)) throw new InvalidArgumentError(`refreshReference(): alpha must be in (0, 1] but is ${alpha}.`, { alpha });
    if (!this.#ref) throw new InvalidStateError('No reference policy to refresh. HINT: call setupReference() on every trainer rank first.');
    const policy = await this.strategy.gatherState('params');
    if (alpha === 1) {
      await this.#ref.loadState({ params: policy });
      return;
    }
    const ref = await this.#ref.gatherState('params');
    for (const [name, p] of policy) {
      const r = ref.get(name)!;
      const out = new Float32Array(p.data.length);
      for (let i = 0; i < out.length; i++) out[i] = alpha * p.data[i]! + (1 - alpha) * r.data[i]!;
      ref.set(name, { ...r, data: out });
    }
    await this.#ref.loadState({ params: ref });
  }

  /**
   * Saves the frozen reference under `root` once (a resumed run must keep the KL
   * reference it started with, not take the resumed policy); returns whether it wrote.
   */
  async saveReference(root: string): Promise<boolean> {
    if (!this.#ref) throw new InvalidStateError('No reference policy to save. HINT: call setupReference() first.');
    if (await latestCheckpoint(root)) return false;
    await saveCheckpoint(this.#ref, { root, step: 0, comm: this.#comm! });
    return true;
  }

  /** Restores the frozen reference saved by saveReference(); false when there is none. */
  async loadReference(root: string): Promise<boolean> {
    if (!(await latestCheckpoint(root))) return false;
    this.#ref?.release();
    this.#ref = await createStrategy(this.config, { comm: this.#comm!, device: this.ctx.device });
    await loadCheckpoint(this.#ref, { path: root, comm: this.#comm!, load: this.config.load });
    return true;
  }

  /** computeLogprobs() under the frozen reference policy. */
  computeRefLogprobs(batch: TrainBatch, temperature = 1): Promise<RowLogprobs> {
    if (!this.#ref) throw new InvalidStateError('No reference policy. HINT: call setupReference() on every trainer rank first.');
    return rowLogprobs(this.#ref, batch, temperature);
  }

  /** Full HF-named state on every rank (tests, weight export). */
  gatherState(kind: StateKind): Promise<Map<string, HostParam>> {
    return this.strategy.gatherState(kind);
  }

  /** Writes the model as a Hugging Face folder transformers loads (train/hf-export.ts); collective over the trainer group. */
  exportHf(dir: string, opts: { dtype?: SaveDtype; expertLayout?: 'per-expert' | 'fused'; merged?: boolean } = {}): Promise<string> {
    return exportHfModel(this.strategy, {
      dir,
      source: this.config.model,
      ...opts,
      ...(this.config.lora ? { lora: this.config.lora } : {}),
      comm: this.#comm!,
    });
  }

  save(root: string, step: number, extra?: Record<string, unknown>): Promise<string> {
    return saveCheckpoint(this.strategy, { root, step, comm: this.#comm!, extra, source: this.config.model });
  }

  async load(path: string): Promise<{ dir: string; step: number; extra: Record<string, unknown> }> {
    const r = await loadCheckpoint(this.strategy, { path, comm: this.#comm!, load: this.config.load });
    return { dir: r.dir, step: r.state.step, extra: r.state.extra };
  }

  shutdown(): void {
    this.#strategy?.release();
    this.#strategy = null;
    this.#ref?.release();
    this.#ref = null;
    if (this.#comm && this.#comm !== this.ctx.comm) this.#comm.destroy();
    this.#comm = null;
  }
}
