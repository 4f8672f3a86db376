/**
 * The `fsdp2` training strategy (PyTorch FSDP2 semantics) over the `dp` ranks of a
 * communicator or a DeviceMesh's `dp` dim, for every model createModel() builds (Qwen3,
 * Qwen3-MoE, Qwen3.5, Qwen3.5-MoE: the units and shards come from paramSpecs, the forward
 * asks for parameters by HF name inside its blocks, so nothing here depends on the family):
 * - every parameter sharded on dim 0 (torch.chunk, padded to the ceil size; shards
 *   may be empty), packed per unit (embedding, each decoder layer, norm + LM head)
 *   into one flat shard, fused experts included (layout.ts);
 * - per model block, one all-gather before use and the unsharded parameters freed
 *   after the block's forward, re-gathered for its backward (root units and, for small
 *   models by default, every unit stay gathered instead: reshardPolicy); one reduce-scatter (sum)
 *   of the block's gradients after its backward (step-source.ts), all on one stream; a small
 *   model kept gathered in one process: one all-gather and one reduce-scatter per step
 *   (fused-comm.ts);
 * - sharded AdamW (one K.adamwMulti over every flat shard), gradient clipping by an
 *   all-reduce of the local Σ g² (for a fused small step, the one that sums a forwardBackward's
 *   loss, so clipping right after it needs no collective of its own), gathered / loaded HF-named full state;
 * - data parallel: each rank runs its rows of the global batch; the loss weights
 *   carry the global normalisation, so gradients are plain sums over ranks.
 * - LoRA (`lora` option): adapters (PEFT names) sharded on dim 0 like any parameter, in
 *   one unit per layer gathered with the layer (layout.ts); the model's LoRA hooks get
 *   the gathered adapter Vars through the same lookup as the base weights. The base is
 *   frozen (no gradient buffers, no reduce-scatter, no moments); gatherState / loadState
 *   carry the adapters by PEFT name (grads and moments: adapters only), loraState()
 *   gathers the adapters alone (for an adapter-only weight sync).
 * - bf16 mixed precision (`dtype: 'bfloat16'`, mixed-precision.ts): the flat shards stay fp32
 *   (master weights, AdamW moments, gathered state, weight sources); each unit's matmul weights
 *   come first in its shard and are cast to bf16 before the all-gather, so the gather moves
 *   half their bytes and the forward / backward compute with them in bf16; gradients and their
 *   reduce-scatter stay fp32 (param_dtype=bf16, reduce_dtype=fp32).
 */
import { copy, Tensor, type Device, type Stream } from '../../runtime/device/device-index.js';
import type { Communicator } from '../../runtime/comm/comm.js';
import { InvalidArgumentError, InvalidStateError } from '../../runtime/errors.js';
import { patchImpl } from '../../runtime/patches.js';
import { Tape } from '../../model/autograd.js';
import type { ModelConfig } from '../../model/config.js';
import * as K from '../../model/kernels/index.js';
import type { AdamWHyper, HostParam } from '../../model/param-store.js';
import { uploadBatch, type ParamSource } from '../../model/qwen3.js';
import { createModel, type CausalLM } from '../../model/create-model.js';
import { LoraAdapters, loraParamSpecs, loraStepSeed, type LoraHooks } from '../../model/lora.js';
import type { LoraConfigInput } from '../../model/lora-config.js';
import type { DeviceMesh } from '../../parallel/device-mesh.js';
import { copyRange, viewOf } from '../../runtime/device/views.js';
import type { HostShard } from '../../parallel/sharded-load.js';
import { clipCoefficient, scaleInPlace, sumSquares } from '../grad-norm.js';
import { anyRank } from '../any-rank.js';
import { crossEntropyLoss, localRows, stepLoss, trimsExactly } from '../rows.js';
import { addRouterAux, tapRouters } from '../router-aux-step.js';
import type { FullState, LossFn, ShardedState, ShardGroups, StateKind, StepLoss, TrainBatch, TrainStrategy } from '../strategy.js';
import type { HfLoadOptions } from '../load-hf-shards.js';
import { loadFsdp2Groups } from './load-shards.js';
import { blockUnits, hostFromGathered, paramProblems, planLayout, shardFromHost, throwProblems, type FlatLayout, type FlatUnit } from './layout.js';
import { SlotPool } from './slot-pool.js';
import { padNumel } from './unit-comm.js';
import { fsdp2SourceDescriptors } from './weight-sources.js';
import type { WeightSource } from '../../parallel/weight-sources.js';
import { adapterSourcesOf, type AdapterSources } from '../../parallel/adapter-sources.js';
import { StepSource, settleGrad, type UnitState } from './step-source.js';
import { bf16ComputeNames, checkTrainerDtype, type TrainerDtype } from '../mixed-precision.js';

export interface Fsdp2Options {
  /** The data-parallel communicator (every rank of it shards the model) ... */
  comm?: Communicator;
  /** ... or a mesh whose `dp` dim does (every other dim must have size 1). */
  mesh?: DeviceMesh;
  cfg: ModelConfig;
  /**
   * Full HF-named host parameters, experts fused (as SingleDeviceStrategy.create takes),
   * or this rank's Shard(0) pieces of them as loadShardedHost() returns them on a 1-D mesh
   * over the same communicator (the host then never holds another rank's piece).
   */
  params: ReadonlyMap<string, HostParam> | ReadonlyMap<string, HostShard>;
  /**
   * Free each decoder layer's unsharded parameters after its forward and re-gather them for
   * backward (true, FSDP2's default), or keep every unit gathered from its forward to its
   * backward (false). The root units (embedding, final norm + LM head) are never resharded
   * after forward, as FSDP2's root: backward needs the head first, and a tied head would
   * gather the embedding again. Default: false when every unit gathered at once fits
   * KEEP_GATHERED_BYTES (small models, whose re-gathers cost more host work than the memory
   * is worth), else true.
   */
  reshardAfterForward?: boolean;
  /** LoRA adapters: only they train, the base is frozen. */
  lora?: Fsdp2LoraOptions;
  /** 'bfloat16': bf16 compute copies of the matmul weights over fp32 masters (default 'float32'). */
  dtype?: TrainerDtype;
}

export interface Fsdp2LoraOptions {
  config: LoraConfigInput;
  /** Full adapter parameters by PEFT name (default: PEFT init from config.seed, B = 0). */
  params?: ReadonlyMap<string, HostParam>;
}

/** A unit's shards on this rank; grad and moments exist for trainable units only. */
interface UnitDevice extends UnitState {
  m?: Tensor;
  v?: Tensor;
}

/**
 * Device bytes of gathered parameter slots (one per unit) under which the default keeps
 * every unit gathered from forward to backward. 32 MiB: about 8M parameters in fp32, where
 * a step is short and each re-gather (a collective plus an unpacking copy)
 * is a visible share of it, while the memory is small next to the activations and the
 * optimizer state.
 */
export const KEEP_GATHERED_BYTES = 32 * 1024 * 1024;

/** Whether to reshard after forward: the option as given, else by the size of all units gathered at once. */
export function reshardPolicy(plan: FlatLayout, option: boolean | undefined): boolean {
  if (option !== undefined) return option;
  return 4 * plan.maxGatheredNumel * plan.units.length > KEEP_GATHERED_BYTES;
}

const OPTION_KEYS = ['comm', 'mesh', 'cfg', 'params', 'reshardAfterForward', 'lora', 'dtype'];

function resolveComm(opts: Fsdp2Options): Communicator {
  if (opts === null || typeof opts !== 'object') throw new InvalidArgumentError('Fsdp2Strategy.create() expects { comm | mesh, cfg, params }.');
  const unknown = Object.keys(opts).filter((k) => !OPTION_KEYS.includes(k));
  if (unknown.length) throw new InvalidArgumentError(`Fsdp2Strategy.create(): unknown option '${unknown[0]}'. Expected one of: ${OPTION_KEYS.join(', ')}.`);
  if ((opts.comm === undefined) === (opts.mesh === undefined)) {
    throw new InvalidArgumentError('Fsdp2Strategy.create(): pass exactly one of comm (the data-parallel communicator) or mesh (a DeviceMesh with a dp dim).');
  }
  if (opts.comm) return opts.comm;
  const mesh = opts.mesh!;
  if (!mesh.names.includes('dp')) {
    throw new InvalidArgumentError(
      `Fsdp2Strategy.create(): the mesh has dims [${mesh.names.join(', ')}] but no 'dp' dim. HINT: DeviceMesh.create(comm, { shape: [n], names: ['dp'] }).`,
    );
  }
  const others = mesh.names.filter((n) => n !== 'dp' && mesh.size(n) > 1);
  if (others.length) {
    throw new InvalidArgumentError(
      `Fsdp2Strategy.create(): mesh dims [${others.join(', ')}] have size > 1; fsdp2 shards over 'dp' only. HINT: use a mesh whose other dims have size 1, or the megatron strategy for tp/ep.`,
    );
  }
  return mesh.comm('dp');
}

export class Fsdp2Strategy implements TrainStrategy {
  readonly kind = 'fsdp2' as const;
  readonly layout: string;
  readonly ranks: number;

  get communicators(): readonly Communicator[] {
    return [this.comm];
  }
  readonly model: CausalLM;
  private step = 0;
  /** Gradients exist once zeroGrad or forwardBackward ran (AdamW skips parameters without one, like torch). */
  private gradsLive = false;
  private momentsLive = false;
  private released = false;
  private run: StepSource | null = null;
  /** The LoRA adapters and hooks, when created with `lora`. */
  readonly lora: { adapters: LoraAdapters; hooks: LoraHooks } | undefined;
  /** forwardBackward calls since the last optimizer step (the LoRA dropout seed's micro-batch index). */
  private micro = 0;
  /**
   * Σ g² of the gradients over every rank as the last forwardBackward left them (all-reduced with
   * its loss sums), for clipGradNorm; null once anything may have changed them since.
   */
  private gradSquares: number | null = null;
  /** Bytes the all-gathers of forward / backward moved into this rank since creation (state gathers not counted). */
  stepGatherBytes = 0;
  /**
   * Units kept gathered after their block's forward: in a forward-only pass the root units
   * (a tied head reuses the embedding), with backward also every layer unless resharding.
   */
  private readonly keepForward: ReadonlySet<FlatUnit>;
  private readonly keepBackward: ReadonlySet<FlatUnit>;

  private constructor(
    readonly cfg: ModelConfig,
    readonly comm: Communicator,
    readonly plan: FlatLayout,
    private readonly units: Map<FlatUnit, UnitDevice>,
    readonly reshardAfterForward: boolean,
    readonly dtype: TrainerDtype,
    /** fp32 zeros for the padding rows of the packed gradients (unit-comm.ts packGradSources). */
    private readonly padZeros: Tensor,
    adapters?: LoraAdapters,
  ) {
    this.ranks = comm.size;
    this.layout = `dp${comm.size}`;
    const source: ParamSource = {
      param: (tape, name) => this.active().param(tape, name),
      blockStart: (tape, block) => this.active().blockStart(tape, block),
      blockEnd: (tape, block, out) => this.active().blockEnd(tape, block, out),
    };
    this.lora = adapters && { adapters, hooks: adapters.hooks((tape, name) => this.active().param(tape, name)) };
    this.model = createModel(cfg, source, this.lora?.hooks);
    const root = [...blockUnits(plan, cfg, { kind: 'embed' }), ...blockUnits(plan, cfg, { kind: 'head' })];
    this.keepForward = new Set(root);
    this.keepBackward = reshardAfterForward ? this.keepForward : new Set(plan.units);
  }

  /**
   * Collective over the dp ranks: checks the parameters on every rank (a rank with bad
   * ones makes every rank throw) and keeps this rank's flat shards on its device.
   */
  static async create(opts: Fsdp2Options): Promise<Fsdp2Strategy> {
    const comm = resolveComm(opts);
    const { cfg, params } = opts;
    if (!(params instanceof Map)) throw new InvalidArgumentError('Fsdp2Strategy.create(): params must be a Map of HF name -> { shape, data: Float32Array }.');
    const option = opts.reshardAfterForward;
    if (option !== undefined && typeof option !== 'boolean')
      throw new InvalidArgumentError(
        `Fsdp2Strategy.create(): reshardAfterForward must be a boolean or left out (then chosen by model size), not ${JSON.stringify(option)}.`,
      );
    const dtype = checkTrainerDtype(opts.dtype, 'Fsdp2Strategy.create() option dtype');
    let adapters: LoraAdapters | undefined;
    let all: ReadonlyMap<string, HostParam | HostShard> = params;
    if (opts.lora) {
      adapters = new LoraAdapters(cfg, opts.lora.config); // ConfigError on a bad config (same on every rank)
      const host = opts.lora.params ?? adapters.initHost();
      adapters.checkHost(host);
      all = new Map([...params, ...host]);
    }
    const plan = planLayout(cfg, comm.size, adapters && loraParamSpecs(cfg, adapters.config), dtype === 'bfloat16' ? bf16ComputeNames(cfg) : undefined);
    const problems = paramProblems(plan, all, comm.size, comm.rank);
    await agree(comm, problems.length > 0, 'Fsdp2Strategy.create()', 'its parameters');
    throwProblems(problems, `Fsdp2Strategy.create(): the parameters do not match the ${cfg.modelType} config`);
    const device = comm.device;
    const stream = device.defaultStream;
    const units = new Map<FlatUnit, UnitDevice>();
    let padZeros: Tensor | undefined;
    try {
      // Made once: a per-step fill would be one more op each step.
      padZeros = Tensor.zeros(
        device,
        [
          Math.max(
            1,
            padNumel(
              plan.units.filter((u) => u.trainable),
              comm.size,
            ),
          ),
        ],
        'fp32',
        { stream },
      );
      for (const u of plan.units) {
        const param = Tensor.fromArray(device, shardFromHost(u, comm.size, comm.rank, all), [u.shardNumel], { stream });
        const zeros = () => Tensor.zeros(device, [u.shardNumel], 'fp32', { stream });
        units.set(u, u.trainable ? { param, grad: zeros(), m: zeros(), v: zeros() } : { param });
      }
    } catch (e) {
      for (const t of units.values()) for (const x of [t.param, t.grad, t.m, t.v]) x?.release();
      padZeros?.release();
      throw e;
    }
    await stream.synchronize();
    return new Fsdp2Strategy(cfg, comm, plan, units, reshardPolicy(plan, option), dtype, padZeros, adapters);
  }

  get optimizerSteps(): number {
    return this.step;
  }

  get device(): Device {
    return this.comm.device;
  }

  private get stream(): Stream {
    return this.comm.device.defaultStream;
  }

  /** Flat shards of each unit (params, grads, AdamW moments; the last three absent for frozen LoRA base units) on this rank: for tests and weight sync. */
  // Gradient shards as of this call: zeroGrad() defers their fill to the next reader or reduce-scatter.
  localShards(): ReadonlyMap<string, { param: Tensor; grad?: Tensor; expAvg?: Tensor; expAvgSq?: Tensor }> {
    this.checkLive('localShards');
    this.settleGrads();
    this.gradSquares = null; // the caller may write the gradients
    return new Map([...this.units].map(([u, t]) => [u.key, { param: t.param, grad: t.grad, expAvg: t.m, expAvgSq: t.v }]));
  }

  /** The LoRA adapters in the weight-source contract (null without LoRA): what an adapter-only weight sync reads. */
  adapterSources(): AdapterSources | null {
    return this.lora ? adapterSourcesOf(this.layout, this.lora.adapters, () => this.loraState()) : null;
  }

  /**
   * This rank's source descriptors: a pure function of the layout and the rank, so computed once
   * (every sync reads them). Their arrays and maps are shared by every weightSources() result, so frozen.
   */
  private sourceDescriptors(): ReturnType<typeof fsdp2SourceDescriptors> {
    if (!this.#descriptors) {
      this.#descriptors = fsdp2SourceDescriptors(this.plan, this.comm.rank);
      for (const d of this.#descriptors) {
        Object.freeze(d.shape);
        Object.freeze(d.map);
      }
    }
    return this.#descriptors;
  }
  #descriptors: ReturnType<typeof fsdp2SourceDescriptors> | undefined;

  /** Every model parameter's padded dim-0 chunk on this rank, Shard(0) over `comm` (weight-sources.ts). */
  weightSources(): WeightSource[] {
    const shards = this.localShards();
    return this.sourceDescriptors().map(({ unit, offset, ...d }) => ({
      ...d,
      comm: this.comm,
      local: viewOf(shards.get(unit)!.param, [d.localNumel], offset),
    }));
  }

  /** This rank's units that train (all, or the LoRA adapter units), with their grad and moments. */
  private trainableUnits(): Array<[FlatUnit, Required<UnitDevice>]> {
    return [...this.units].filter(([u]) => u.trainable) as Array<[FlatUnit, Required<UnitDevice>]>;
  }

  private active(): StepSource {
    if (!this.run) throw new InvalidArgumentError('Fsdp2Strategy.model runs only inside forwardBackward() (its parameters are sharded).');
    return this.run;
  }

  forwardBackward(batch: TrainBatch, loss: LossFn = crossEntropyLoss): Promise<StepLoss> {
    return this.pass(batch, loss, true);
  }

  /** Eval-mode forward and loss (no dropout, no backward, gradients untouched). */
  forward(batch: TrainBatch, loss: LossFn = crossEntropyLoss): Promise<StepLoss> {
    return this.pass(batch, loss, false);
  }

  private async pass(batch: TrainBatch, loss: LossFn, backward: boolean): Promise<StepLoss> {
    const what = backward ? 'forwardBackward' : 'forward';
    this.checkLive(what);
    if (this.run) throw new InvalidArgumentError(`Fsdp2Strategy.${what}(): a step is already running; await it first.`);
    const rows = localRows(batch, this.comm.size, this.comm.rank, trimsExactly(this.cfg));
    const { stream, device } = this;
    const pool = new SlotPool(device, this.plan.maxGatheredNumel);
    const run = new StepSource(this.cfg, this.plan, this.units, this.comm, pool, stream, backward ? this.keepBackward : this.keepForward, this.padZeros);
    const tape = new Tape({ stream, impl: patchImpl });
    this.run = run;
    if (backward) {
      this.gradsLive = true;
      this.gradSquares = null;
    }
    if (this.lora && !backward) this.lora.hooks.dropoutSeed = null;
    if (this.lora && backward) {
      this.lora.hooks.dropoutSeed = loraStepSeed(this.lora.adapters.config.seed, this.step, this.micro++);
      // Token rows of the global untrimmed batch: the dropout masks do not depend on the trim.
      const seq = { global: batch.seqLen, local: rows.seqLen };
      this.lora.hooks.dropoutWindow = { row0: rows.row0 * batch.seqLen, total: batch.batch * batch.seqLen, seq };
    }
    let squares: Tensor | null = null;
    try {
      await run.prefetch();
      const b = uploadBatch(rows.inputIds, rows.rows, rows.seqLen, device, stream, rows.attentionMask);
      for (const t of [b.ids, b.positions, b.mask]) if (t) tape.own(t);
      tapRouters(tape, this.cfg);
      const logits = this.model.forward(tape, b);
      // The router aux loss's counts are summed over dp (each rank holds other rows).
      const { terms, roots } = await addRouterAux(tape, this.cfg, rows, await loss(tape, logits, rows, batch), (local) => this.allReduceHost(local));
      const { perToken, weights } = terms;
      if (backward) {
        tape.backward(perToken, tape.own(Tensor.fromArray(device, weights, [weights.length], { stream })), roots);
        await run.finish();
        // A small model's (fused collectives): the gradients' Σ g² rides along with the loss sums'
        // all-reduce, so clipGradNorm after this step needs no collective (and no host round trip)
        // of its own. Not for a large one: a pass over every gradient per micro-batch would cost
        // more than the collective it saves when gradients are accumulated.
        if (run.fused) squares = this.localSquares();
      }
      const sq = squares;
      return await stepLoss(terms, stream, (local) => this.allReduceHost(local, sq));
    } finally {
      squares?.release();
      this.stepGatherBytes += run.gathered.bytes;
      this.run = null;
      run.dispose();
      pool.dispose();
      tape.release();
    }
  }

  zeroGrad(): void {
    this.checkLive('zeroGrad');
    this.gradSquares = null;
    // No fill: the next reduce-scatter writes the shard (UnitState.gradUnset); a reader before it fills (settleGrads).
    for (const [, t] of this.trainableUnits()) t.gradUnset = true;
    this.gradsLive = true;
  }

  /** Fills the gradient shards zeroGrad left unwritten (no reduce-scatter wrote them since): before anything reads them. */
  private settleGrads(): void {
    for (const [, t] of this.trainableUnits()) settleGrad(t, this.stream);
  }

  async clipGradNorm(maxNorm: number | null): Promise<number> {
    this.checkLive('clipGradNorm');
    if (maxNorm !== null && !(typeof maxNorm === 'number' && maxNorm > 0)) {
      throw new InvalidArgumentError(`clipGradNorm(): expected a positive maxNorm or null but received ${String(maxNorm)}.`);
    }
    const { stream } = this;
    const grads = this.trainableUnits().map(([, t]) => t.grad);
    let squares = this.gradSquares;
    this.gradSquares = null; // scaled below
    if (squares === null) {
      const ss = this.localSquares();
      try {
        await this.comm.allReduce(ss, ss, 'sum', stream);
        squares = ((await ss.toArray({ stream })) as Float32Array)[0]!;
      } finally {
        ss.release();
      }
    }
    const norm = Math.sqrt(squares);
    const coef = clipCoefficient(norm, maxNorm);
    for (const g of grads) scaleInPlace(g, coef, stream);
    return norm;
  }

  /** This rank's Σ g² over its gradient shards ([1, 1] fp32 on the stream; the caller releases it). */
  private localSquares(): Tensor {
    this.settleGrads();
    const grads = this.trainableUnits().map(([, t]) => t.grad);
    return sumSquares(grads, this.stream) ?? Tensor.zeros(this.device, [1, 1], 'fp32', { stream: this.stream });
  }

  optimizerStep(hp: AdamWHyper): void {
    this.checkLive('optimizerStep');
    if (!this.gradsLive) return;
    this.step++;
    this.micro = 0;
    this.momentsLive = true;
    this.settleGrads();
    // One op for every unit's shard (bitwise one adamw per shard).
    K.adamwMulti(
      this.trainableUnits().map(([, t]) => t),
      { ...hp, step: this.step, stream: this.stream, impl: 'fast' },
    );
  }

  /**
   * Collective: the full LoRA adapter parameters alone, by PEFT name, on every rank (one
   * all-gather per adapter unit): what an adapter-only weight sync sends.
   */
  async loraState(): Promise<Map<string, HostParam>> {
    this.checkLive('loraState');
    if (!this.lora)
      throw new InvalidArgumentError(
        "Fsdp2Strategy.loraState(): this strategy has no LoRA adapters. HINT: create it with the `lora` option, or use gatherState('params') for the full weights.",
      );
    return this.gatherUnits(this.trainableUnits().map(([u, t]) => [u, t.param]));
  }

  /** Collective: the full state of one kind by HF name on every rank (one all-gather per unit; with LoRA, grads and moments of the adapters only). */
  async gatherState(kind: StateKind): Promise<Map<string, HostParam>> {
    this.checkLive('gatherState');
    const pick = { params: 'param', grads: 'grad', exp_avg: 'm', exp_avg_sq: 'v' } as const;
    const field = pick[kind];
    if (field === undefined)
      throw new InvalidArgumentError(`gatherState(): unknown kind ${JSON.stringify(kind)}; expected one of ${Object.keys(pick).join(', ')}.`);
    if ((field === 'grad' && !this.gradsLive) || ((field === 'm' || field === 'v') && !this.momentsLive)) return new Map();
    if (field === 'grad') this.settleGrads();
    const units = field === 'param' ? [...this.units] : this.trainableUnits();
    return this.gatherUnits(units.map(([u, t]) => [u, t[field]!]));
  }

  private async gatherUnits(shards: ReadonlyArray<readonly [FlatUnit, Tensor]>): Promise<Map<string, HostParam>> {
    const out = new Map<string, HostParam>();
    const { stream, comm } = this;
    const buf = Tensor.empty(this.device, [this.plan.maxGatheredNumel], 'fp32');
    try {
      for (const [u, t] of shards) {
        const gathered = viewOf(buf, [comm.size * u.shardNumel]);
        await comm.allGather(t, gathered, stream);
        hostFromGathered(u, comm.size, (await gathered.toArray({ stream })) as Float32Array, out);
      }
    } finally {
      buf.release();
    }
    return out;
  }

  /** Collective: every rank keeps its shards of `state` (full HF-named host tensors); with optimizer state, the step count too. */
  loadState(state: FullState): Promise<void> {
    return this.restore(state, 'loadState');
  }

  /**
   * Collective: this rank's Shard(0) pieces of each group of the HF folder `dir` (the
   * placements of the initial load, load-shards.ts). LoRA adapters (and their moments) are
   * small and come whole to every rank, Replicate; the base in pieces.
   */
  async loadShards(dir: string, groups: ShardGroups, opts: HfLoadOptions = {}): Promise<Array<Map<string, HostShard>>> {
    this.checkLive('loadShards');
    const whole = this.lora && new Map(loraParamSpecs(this.cfg, this.lora.adapters.config).map((s) => [s.name, s.shape] as const));
    return loadFsdp2Groups(dir, this.cfg, this.comm, { ...groups, ...(whole ? { whole } : {}) }, opts);
  }

  /**
   * Collective: as loadState, from this rank's pieces (loadShards): Shard(0) rows, or whole
   * tensors placed Replicate (LoRA adapters); the host never holds another rank's rows.
   */
  loadShardedState(state: ShardedState): Promise<void> {
    const plain = (m: ReadonlyMap<string, HostShard>): ReadonlyMap<string, HostParam | HostShard> =>
      m instanceof Map
        ? new Map(
            [...(m as ReadonlyMap<string, HostShard>)].map(([n, s]) => [
              n,
              s.placements.every((p) => p.kind === 'replicate') ? { shape: s.shape, data: s.data } : s,
            ]),
          )
        : m;
    const opt = state?.optimizer;
    return this.restore(
      state && { params: plain(state.params), ...(opt ? { optimizer: { step: opt.step, expAvg: plain(opt.expAvg), expAvgSq: plain(opt.expAvgSq) } } : {}) },
      'loadShardedState',
    );
  }

  /** Full tensors, this rank's Shard(0) pieces, or both (paramProblems checks either). */
  private async restore(state: HostState, fn: string): Promise<void> {
    this.checkLive(fn);
    const { comm } = this;
    const problems: string[] = [];
    if (state === null || typeof state !== 'object' || !(state.params instanceof Map)) problems.push('state.params must be a Map of HF name -> host tensor');
    else {
      problems.push(...paramProblems(this.plan, state.params, comm.size, comm.rank));
      const opt = state.optimizer;
      if (opt !== undefined) {
        if (!Number.isInteger(opt.step) || opt.step < 0) problems.push(`optimizer.step must be a non-negative integer (got ${String(opt.step)})`);
        for (const [what, m] of [
          ['exp_avg', opt.expAvg],
          ['exp_avg_sq', opt.expAvgSq],
        ] as const) {
          if (!(m instanceof Map)) problems.push(`optimizer ${what} must be a Map`);
          else problems.push(...paramProblems(this.plan, m, comm.size, comm.rank, what).filter((p) => !p.startsWith('missing')));
        }
      }
    }
    await agree(comm, problems.length > 0, `${fn}()`, 'its state');
    throwProblems(problems, `${fn}(): the state does not match the model`);
    const { stream } = this;
    const upload = (dst: Tensor, u: FlatUnit, host: ReadonlyMap<string, HostParam | HostShard>) => {
      const t = Tensor.fromArray(this.device, shardFromHost(u, comm.size, comm.rank, host), [u.shardNumel], { stream });
      copy(dst, t, { stream });
      t.release();
    };
    for (const [u, t] of this.units) {
      upload(t.param, u, state.params);
      if (state.optimizer && u.trainable) {
        upload(t.m!, u, state.optimizer.expAvg);
        upload(t.v!, u, state.optimizer.expAvgSq);
      }
    }
    this.micro = 0;
    if (state.optimizer) {
      this.step = state.optimizer.step;
      this.momentsLive = true;
    }
    await stream.synchronize();
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    for (const t of this.units.values()) for (const x of [t.param, t.grad, t.m, t.v]) x?.release();
    this.padZeros.release();
  }

  /**
   * `values` summed over the ranks. With `squares` (this rank's Σ g², on the device) it is summed
   * in the same all-reduce, one element past the values, and kept as gradSquares.
   */
  private async allReduceHost(values: Float32Array, squares: Tensor | null = null): Promise<Float32Array> {
    const { stream } = this;
    const n = values.length;
    const host = squares ? new Float32Array(n + 1) : values;
    if (squares) host.set(values);
    const t = Tensor.fromArray(this.device, host, [host.length], { stream });
    try {
      if (squares) copyRange(t, n, squares, 0, 1, stream);
      await this.comm.allReduce(t, t, 'sum', stream);
      const all = (await t.toArray({ stream })) as Float32Array;
      if (!squares) return all;
      this.gradSquares = all[n]!;
      return all.subarray(0, n);
    } finally {
      t.release();
    }
  }

  private checkLive(what: string): void {
    if (this.released)
      throw new InvalidStateError(`Fsdp2Strategy.${what}(): the strategy was released. HINT: create a new one (Fsdp2Strategy.create) after release().`);
  }
}

type HostMap = ReadonlyMap<string, HostParam | HostShard>;
type HostState = { params: HostMap; optimizer?: { step: number; expAvg: HostMap; expAvgSq: HostMap } };

/** Throws on every rank when any rank rejected its input (see any-rank.ts). */
async function agree(comm: Communicator, bad: boolean, fn: string, what: string): Promise<void> {
  if ((await anyRank(comm, bad)) && !bad)
    throw new InvalidArgumentError(`${fn}: another rank rejected ${what}; every rank must pass the same, valid input. See that rank's error.`);
}
