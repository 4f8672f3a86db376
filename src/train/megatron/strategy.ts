/**
 * The `megatron` training strategy: tensor parallel (tp), expert parallel (ep) and
 * data parallel (dp) over a DeviceMesh ['dp', 'tp'] (rank = d·tp + t), holding its
 * parameters under Megatron-Core names and layouts (bridge.ts).
 *
 * - TP: linear_qkv / linear_fc1 column parallel, linear_proj / linear_fc2 row parallel
 *   (model.ts). DEVIATION from Megatron: the embedding and output layer are replicated
 *   over tp (not vocab-parallel), so logits are full-vocabulary on every rank.
 * - EP: experts sharded over an ep group (ranks with the same t whose d share
 *   floor(d / ep); ep coordinate d % ep), expert tensor parallel = 1, so experts and
 *   the router are replicated over tp; all-to-all token dispatch with one host read of
 *   the token counts per MoE layer (expert-parallel.ts).
 * - DP: each rank computes its dp share of the global batch (rows.ts localRows);
 *   dense gradients are all-reduced over dp as one flat bucket, expert gradients over
 *   the dp/ep ranks holding the same experts (units.ts).
 * - TP-replicated parameters (norms, embedding, output layer, router, experts) get
 *   identical gradients on every TP rank by construction (the inputs of their ops are
 *   identical and copyToTp sums the partial input gradients); q/k layernorms, whose
 *   gradients are partial per TP rank, are summed over tp (model.ts).
 * - LoRA (`lora` option): PEFT-named adapters split as lora-shards.ts says, applied by
 *   lora-hook.ts; base weights are frozen (no gradient buffers, no AdamW moments), only
 *   the adapters train. Adapter gradients are all-reduced over dp ('dense'), over the
 *   expert-data-parallel ranks ('expert') or, when partial per TP rank, over the world
 *   ('partial' = tp and dp in one collective). gatherState / loadState carry the
 *   adapters under their PEFT names next to the base weights (grads and moments: the
 *   adapters only, as the single-device LoRA); loraState() gathers the adapters alone
 *   (the tensors an adapter-only weight sync needs).
 * - Models: Qwen3 / Qwen3-MoE and Qwen3.5 / Qwen3.5-MoE (specs.ts, qwen35-blocks.ts): the
 *   Gated DeltaNet layers are replicated over tp (no GDN TP / CP split, as the reference
 *   Megatron fallback), the shared expert splits as the dense MLP, its gate is replicated.
 *   No context parallelism (qwen35-limits.ts).
 */
import { axpy, copy, fill, Tensor, type Stream } from '../../runtime/device/device-index.js';
import type { Communicator } from '../../runtime/comm/comm.js';
import { InvalidArgumentError } from '../../runtime/errors.js';
import { patchImpl } from '../../runtime/patches.js';
import { DeviceMesh } from '../../parallel/device-mesh.js';
import { Tape, Var } from '../../model/autograd.js';
import type { ModelConfig } from '../../model/config.js';
import * as K from '../../model/kernels/index.js';
import type { AdamWHyper, HostParam } from '../../model/param-store.js';
import { uploadBatch } from '../../model/qwen3.js';
import { clipCoefficient, scaleInPlace, sumSquares } from '../grad-norm.js';
import { crossEntropyLoss, localRows, stepLoss, trimsExactly } from '../rows.js';
import { addRouterAux, tapRouters } from '../router-aux-step.js';
import type { FullState, LossFn, ShardedState, ShardGroups, StateKind, StepLoss, TrainBatch, TrainStrategy } from '../strategy.js';
import type { HfLoadOptions } from '../load-hf-shards.js';
import { anyRank } from '../any-rank.js';
import type { HostShard } from '../../parallel/sharded-load.js';
import { checkParamsAgainstConfig } from '../../model/params.js';
import { loadMegatronHfGroups, megatronLocalFromHf } from './load-shards.js';
import { expertNames, hfToMegatron, megatronSpecs, megatronToHf, tpGather, tpLocalShape, tpSlice } from './bridge.js';
import { PendingComms } from './comm-ops.js';
import { checkParallelSizes, layoutName, type ParallelSizes } from './layout.js';
import { refuseContextParallel } from './qwen35-limits.js';
import { refuseMegatronAcrossProcesses } from './span-limits.js';
import { MegatronModel, type ParallelLinearHook } from './model.js';
import { GradBuckets, stackExperts, type Unit } from './units.js';
import { MegatronLocalParams } from './local-params.js';
import { LoraAdapters, loraParamSpecs, loraStepSeed } from '../../model/lora.js';
import type { LoraConfigInput } from '../../model/lora-config.js';
import { MegatronLoraHook } from './lora-hook.js';
import { loraGather, loraLocalShape, loraShardSpecs, loraSlice } from './lora-shards.js';
import { splitViews } from './views.js';
import { expertUnitName, megatronSourceDescriptors } from './weight-sources.js';
import type { WeightSource } from '../../parallel/weight-sources.js';
import { adapterSourcesOf, type AdapterSources } from '../../parallel/adapter-sources.js';

export interface MegatronOptions {
  /** The world communicator (every rank calls create with the same options). */
  comm: Communicator;
  cfg: ModelConfig;
  /**
   * Full HF-named host parameters, fused experts (like SingleDeviceStrategy.create), or
   * this rank's Megatron pieces as loadMegatronShards() builds them from a checkpoint.
   */
  params: ReadonlyMap<string, HostParam> | MegatronLocalParams;
  tp?: number;
  /** Default: world size / tp. */
  dp?: number;
  /** Expert-parallel size; divides dp and the number of experts. Default 1. */
  ep?: number;
  /** Context-parallel size: only 1 in this build (anything else is a ConfigError, qwen35-limits.ts). */
  cp?: number;
  /** Optional replacement of the parallel linears (custom experiments; `lora` installs its own). */
  linearHook?: ParallelLinearHook;
  /** LoRA adapters: only they train, base weights are frozen (see the file header). */
  lora?: MegatronLoraOptions;
}

export interface MegatronLoraOptions {
  config: LoraConfigInput;
  /** Full adapter parameters by PEFT name (default: PEFT init from config.seed, B = 0). */
  params?: ReadonlyMap<string, HostParam>;
}

export class MegatronStrategy implements TrainStrategy {
  readonly kind = 'megatron' as const;
  readonly layout: string;
  readonly ranks: number;

  /** The expert-parallel group (rank r holds global experts [r·E/ep, (r+1)·E/ep)); for weight sync. */
  get expertComm(): Communicator {
    return this.epComm;
  }

  get communicators(): readonly Communicator[] {
    return [this.mesh.parent, this.mesh.comm('dp'), this.mesh.comm('tp'), this.epComm, this.edpComm];
  }
  readonly model: MegatronModel;
  private readonly byName = new Map<string, Unit>();
  private readonly grads: GradBuckets;
  private readonly pending = new PendingComms();
  private step = 0;
  /** Units that train (every unit without LoRA; the adapters with it). */
  private readonly trainable: Unit[];
  /** The LoRA adapters and their hook, when created with `lora`. */
  readonly lora: { adapters: LoraAdapters; hook: MegatronLoraHook } | undefined;
  /** forwardBackward calls since the last optimizer step (the LoRA dropout seed's micro-batch index). */
  private micro = 0;

  private constructor(
    readonly cfg: ModelConfig,
    readonly sizes: ParallelSizes,
    readonly mesh: DeviceMesh,
    /** Experts' group and the group of ranks replicating the same experts. */
    private readonly epComm: Communicator,
    private readonly edpComm: Communicator,
    private readonly units: Unit[],
    linearHook: ParallelLinearHook | undefined,
    adapters: LoraAdapters | undefined,
  ) {
    this.layout = layoutName(sizes);
    this.ranks = sizes.tp * sizes.dp;
    for (const u of units) this.byName.set(u.name, u);
    this.trainable = units.filter((u) => u.var.requiresGrad);
    this.grads = new GradBuckets(mesh.device, this.trainable, this.stream);
    const hook = adapters && new MegatronLoraHook(adapters, cfg, sizes.tp, mesh.coordinate[1]!, (name) => this.unit(name).var);
    this.lora = adapters && { adapters, hook: hook! };
    this.model = new MegatronModel(
      cfg,
      {
        param: (name) => this.unit(name).var,
        experts: (layer) => ({ fc1: this.unit(expertUnitName(layer, 'fc1')).var, fc2: this.unit(expertUnitName(layer, 'fc2')).var }),
      },
      { tp: mesh.comm('tp'), ep: epComm, pending: this.pending },
      hook ? (tape, x, w, name, mode) => hook.linear(tape, x, w, name, mode) : linearHook,
      hook ? (tape, layer) => hook.moe(tape, layer) : undefined,
    );
  }

  /** Collective over `comm`: builds the mesh and groups, and uploads this rank's shards. */
  static async create(o: MegatronOptions): Promise<MegatronStrategy> {
    refuseContextParallel(o.cfg, o.cp, 'MegatronStrategy.create()'); // before any collective: every rank throws alike
    refuseMegatronAcrossProcesses(o.comm, o.tp, o.ep, 'MegatronStrategy.create()'); // likewise
    const sizes = checkParallelSizes(o.cfg, o.comm.size, o);
    const given = o.params instanceof MegatronLocalParams ? o.params : null;
    // Full parameters: validates names and shapes before any collective.
    const full = given ? null : hfToMegatron(o.cfg, o.params as ReadonlyMap<string, HostParam>);
    const lora = o.lora && prepareLora(o);
    const mesh = await DeviceMesh.create(o.comm, { shape: [sizes.dp, sizes.tp], names: ['dp', 'tp'] });
    const [d, t] = mesh.coordinate as [number, number];
    const { tp, ep } = sizes;
    const epComm = (await o.comm.split(Math.floor(d / ep) * tp + t, d % ep))!;
    const edpComm = (await o.comm.split((d % ep) * tp + t, Math.floor(d / ep)))!;
    const stream = o.comm.device.defaultStream;
    const units: Unit[] = [];
    const upload = (data: Float32Array, shape: readonly number[], name: string, trainable = !lora) =>
      new Var(Tensor.fromArray(o.comm.device, data, shape, { stream }), trainable, name);
    const E = o.cfg.moe?.numExperts ?? 0;
    const El = E / ep;
    for (const spec of megatronSpecs(o.cfg)) {
      if (spec.expert !== undefined) {
        // One stacked unit per layer and projection: expert 0's spec stands for the layer's experts.
        if (spec.expert !== 0) continue;
        const fc = spec.name.endsWith('linear_fc1.weight') ? 'fc1' : 'fc2';
        const name = expertUnitName(spec.layer!, fc);
        const shape = [El, ...spec.shape];
        const data = given ? given.get(name, shape).data : stackExperts(full!, spec.layer!, fc, (d % ep) * El, El);
        units.push({ name, group: 'expert', expert: { layer: spec.layer!, fc }, var: upload(data, shape, name), grad: undefined! });
        continue;
      }
      const local = given ? given.get(spec.name, tpLocalShape(spec, tp)) : tpSlice(spec, full!.get(spec.name)!, tp, t);
      units.push({ name: spec.name, group: 'dense', spec, var: upload(local.data, local.shape, spec.name), grad: undefined! });
    }
    for (const spec of lora?.shards ?? []) {
      const data = loraSlice(spec, lora!.host.get(spec.name)!, tp, t, ep, d % ep);
      const group = spec.split === 'experts' ? 'expert' : spec.partialOverTp ? 'partial' : 'dense';
      units.push({ name: spec.name, group, lora: spec, var: upload(data, loraLocalShape(spec, tp, ep), spec.name, true), grad: undefined! });
    }
    return new MegatronStrategy(o.cfg, sizes, mesh, epComm, edpComm, units, o.linearHook, lora?.adapters);
  }

  get optimizerSteps(): number {
    return this.step;
  }

  private get stream(): Stream {
    return this.mesh.device.defaultStream;
  }

  private get tpRank(): number {
    return this.mesh.coordinate[1]!;
  }

  private get dpRank(): number {
    return this.mesh.coordinate[0]!;
  }

  private unit(name: string): Unit {
    const u = this.byName.get(name);
    if (!u) throw new InvalidArgumentError(`MegatronStrategy: no local parameter named ${name}.`, { name });
    return u;
  }

  /** This rank's tensors by local Megatron name (experts with local indices, as views); `kind` 'grads' gives the accumulated gradients. */
  localTensors(kind: 'params' | 'grads' = 'params'): Map<string, Tensor> {
    const out = new Map<string, Tensor>();
    for (const u of this.units) {
      const t = kind === 'params' ? u.var.value : u.grad;
      if (!t) continue; // frozen (LoRA base): no gradient
      if (u.group !== 'expert' || u.lora) out.set(u.name, t);
      else {
        const El = t.shape[0]!;
        splitViews(
          t,
          Array.from({ length: El }, () => t.shape.slice(1)),
        ).forEach((v, e) => out.set(expertNames(u.expert!.layer, e)[u.expert!.fc], v));
      }
    }
    return out;
  }

  /** The LoRA adapters in the weight-source contract (null without LoRA): what an adapter-only weight sync reads. */
  adapterSources(): AdapterSources | null {
    return this.lora ? adapterSourcesOf(this.layout, this.lora.adapters, () => this.loraState()) : null;
  }

  /** This rank's Megatron tensors with their placements over tp / ep and HF mappings (weight-sources.ts). */
  weightSources(): WeightSource[] {
    const comms = { tp: this.mesh.comm('tp'), ep: this.epComm };
    return megatronSourceDescriptors(this.cfg, this.sizes, this.mesh.coordinate).map(({ group, ...d }) => {
      const t = this.unit(d.key).var.value;
      return { ...d, comm: group ? comms[group] : null, local: t.reshape([t.numel]) };
    });
  }

  forwardBackward(batch: TrainBatch, loss: LossFn = crossEntropyLoss): Promise<StepLoss> {
    return this.pass(batch, loss, true);
  }

  /** Eval-mode forward and loss (no dropout, no backward, gradients untouched). */
  forward(batch: TrainBatch, loss: LossFn = crossEntropyLoss): Promise<StepLoss> {
    return this.pass(batch, loss, false);
  }

  private async pass(batch: TrainBatch, loss: LossFn, backward: boolean): Promise<StepLoss> {
    const rows = localRows(batch, this.sizes.dp, this.dpRank, trimsExactly(this.cfg));
    const { stream } = this;
    const device = this.mesh.device;
    const tape = new Tape({ stream, impl: patchImpl });
    if (this.lora) {
      const seed = backward ? loraStepSeed(this.lora.adapters.config.seed, this.step, this.micro++) : null;
      // Token rows of the global untrimmed batch: the dropout masks do not depend on the trim.
      const seq = { global: batch.seqLen, local: rows.seqLen };
      this.lora.hook.window = { seed, row0: rows.row0 * batch.seqLen, total: batch.batch * batch.seqLen, seq };
    }
    try {
      if (backward) this.grads.zeroStep(stream);
      const b = uploadBatch(rows.inputIds, rows.rows, rows.seqLen, device, stream, rows.attentionMask);
      for (const t of [b.ids, b.positions, b.mask]) if (t) tape.own(t);
      // Sums over dp only: TP ranks hold the same rows (the ep ranks are dp ranks).
      const dp = this.mesh.comm('dp');
      const sumDp =
        dp.size > 1
          ? async (local: Float32Array) => {
              const t = tape.own(Tensor.fromArray(device, local, [local.length], { stream }));
              this.pending.track(dp.allReduce(t, t, 'sum', stream));
              if (dp.spansProcesses) await this.pending.settle();
              return (await t.toArray({ stream })) as Float32Array;
            }
          : undefined;
      tapRouters(tape, this.cfg);
      const logits = await this.model.forward(tape, b);
      const { terms, roots } = await addRouterAux(tape, this.cfg, rows, await loss(tape, logits, rows, batch), sumDp);
      const { perToken, weights } = terms;
      if (backward) tape.backward(perToken, tape.own(Tensor.fromArray(device, weights, [weights.length], { stream })), roots);
      // One all-reduce per gradient bucket, then accumulate.
      for (const [group, comm] of backward
        ? ([
            ['dense', this.mesh.comm('dp')],
            ['expert', this.edpComm],
            ['partial', this.mesh.parent],
          ] as const)
        : []) {
        const step = this.grads.step.get(group);
        if (!step) continue;
        if (comm.size > 1) this.pending.track(comm.allReduce(step, step, 'sum', stream));
        if (comm.spansProcesses) await this.pending.settle(); // step is complete only then (span-limits.ts)
        axpy(this.grads.acc.get(group)!, 1, step, { stream });
      }
      const result = await stepLoss(terms, stream, sumDp);
      await this.pending.settle();
      return result;
    } finally {
      await this.pending.settle().catch(() => undefined);
      tape.release();
    }
  }

  zeroGrad(): void {
    this.grads.zeroAcc(this.stream);
  }

  /**
   * Σ g² over what this rank uniquely owns, all-reduced over the world: TP shards on
   * dp rank 0, TP-replicated tensors on dp rank 0 / tp rank 0, experts on tp rank 0
   * of the first expert-data-parallel replica.
   */
  async clipGradNorm(maxNorm: number | null): Promise<number> {
    const { stream } = this;
    const d = this.dpRank,
      t = this.tpRank;
    const counted = this.trainable.filter((u) => {
      if (u.group === 'expert') return t === 0 && Math.floor(d / this.sizes.ep) === 0;
      const tpReplicated = u.lora ? u.lora.split === 'replicated' : u.spec!.tp === 'replicated';
      return d === 0 && (!tpReplicated || t === 0);
    });
    const ss =
      sumSquares(
        counted.map((u) => u.grad),
        stream,
      ) ?? Tensor.zeros(this.mesh.device, [1, 1], 'fp32', { stream });
    try {
      if (this.ranks > 1) await this.mesh.parent.allReduce(ss, ss, 'sum', stream);
      const norm = Math.sqrt(((await ss.toArray({ stream })) as Float32Array)[0]!);
      const coef = clipCoefficient(norm, maxNorm);
      for (const g of this.grads.acc.values()) scaleInPlace(g, coef, stream);
      return norm;
    } finally {
      ss.release();
    }
  }

  optimizerStep(hp: AdamWHyper): void {
    const { stream } = this;
    this.step++;
    this.micro = 0;
    const list: K.AdamWEntry[] = [];
    for (const u of this.trainable) {
      const shape = u.var.value.shape;
      u.m ??= Tensor.zeros(this.mesh.device, shape, 'fp32', { stream });
      u.v ??= Tensor.zeros(this.mesh.device, shape, 'fp32', { stream });
      list.push({ param: u.var.value, grad: u.grad, m: u.m, v: u.v });
    }
    K.adamwMulti(list, { ...hp, step: this.step, stream });
  }

  /**
   * Full HF-named state (fused experts) on every rank: TP shards all-gathered over tp,
   * experts over ep, then the bridge; LoRA adapters under their PEFT names. With LoRA,
   * 'grads' / 'exp_avg' / 'exp_avg_sq' hold the adapters only (base weights are frozen).
   */
  async gatherState(kind: StateKind): Promise<Map<string, HostParam>> {
    const pick = (u: Unit): Tensor | undefined => (kind === 'params' ? u.var.value : kind === 'grads' ? u.grad : kind === 'exp_avg' ? u.m : u.v);
    const units = kind === 'params' ? this.units : this.trainable;
    if (units.some((u) => pick(u) === undefined)) return new Map(); // no optimizer state yet
    return this.gatherUnits(units, pick);
  }

  /**
   * Collective: the full LoRA adapter parameters alone, by PEFT name, on every rank (what
   * an adapter-only weight sync sends). Throws when the strategy has no LoRA.
   */
  async loraState(): Promise<Map<string, HostParam>> {
    if (!this.lora)
      throw new InvalidArgumentError(
        "MegatronStrategy.loraState(): this strategy has no LoRA adapters. HINT: create it with the `lora` option, or use gatherState('params') for the full weights.",
      );
    return this.gatherUnits(
      this.units.filter((u) => u.lora),
      (u) => u.var.value,
    );
  }

  private async gatherUnits(units: readonly Unit[], pick: (u: Unit) => Tensor | undefined): Promise<Map<string, HostParam>> {
    const { stream } = this;
    const read = async (t: Tensor) => (await t.toArray({ stream })) as Float32Array;
    const gather = async (t: Tensor, comm: Communicator): Promise<Float32Array> => {
      if (comm.size === 1) return read(t);
      const all = Tensor.empty(t.device, [comm.size * t.numel], 'fp32');
      try {
        this.pending.track(comm.allGather(t, all, stream));
        if (comm.spansProcesses) await this.pending.settle();
        const host = await read(all);
        await this.pending.settle();
        return host;
      } finally {
        all.release();
      }
    };
    const full = new Map<string, HostParam>();
    const adapters = new Map<string, HostParam>();
    const tp = this.mesh.comm('tp');
    for (const u of units) {
      const t = pick(u)!;
      if (u.lora) {
        const spec = u.lora;
        const comm = spec.split === 'experts' ? this.epComm : tp;
        const all = spec.split === 'replicated' ? await read(t) : await gather(t, comm);
        adapters.set(u.name, loraGather(spec, all, spec.split === 'replicated' ? 1 : comm.size));
      } else if (u.group === 'dense') {
        const spec = u.spec!;
        if (spec.tp === 'replicated') full.set(spec.name, { shape: spec.shape, data: await read(t) });
        else {
          const all = await gather(t, tp);
          const n = t.numel;
          const shards = Array.from({ length: tp.size }, (_, q) => ({ shape: tpLocalShape(spec, tp.size), data: all.subarray(q * n, (q + 1) * n) }));
          full.set(spec.name, tpGather(spec, shards));
        }
      } else {
        const all = await gather(t, this.epComm);
        const per = t.numel / t.shape[0]!;
        const shape = t.shape.slice(1);
        const E = this.cfg.moe!.numExperts;
        for (let e = 0; e < E; e++) full.set(expertNames(u.expert!.layer, e)[u.expert!.fc], { shape, data: all.slice(e * per, (e + 1) * per) });
      }
    }
    const out = full.size ? megatronToHf(this.cfg, full) : new Map<string, HostParam>();
    for (const [n, p] of adapters) out.set(n, p);
    return out;
  }

  /**
   * Full HF state → this rank's shards (and AdamW moments when given), through the
   * bridge. With LoRA, `params` also holds every adapter by PEFT name; moments are read
   * for the adapters only (a missing one starts at zero; base moments are ignored: the
   * base is frozen).
   */
  async loadState(state: FullState): Promise<void> {
    const loraNames = new Set(this.lora?.adapters.names ?? []);
    const split = (m: ReadonlyMap<string, HostParam>) => {
      const base = new Map<string, HostParam>(),
        lora = new Map<string, HostParam>();
      for (const [n, p] of m) (loraNames.has(n) ? lora : base).set(n, p);
      return { base, lora };
    };
    const sp = split(state.params);
    this.lora?.adapters.checkHost(sp.lora);
    const params = hfToMegatron(this.cfg, sp.base);
    const opt = state.optimizer;
    const moments = !opt
      ? null
      : this.lora
        ? [split(opt.expAvg).lora, split(opt.expAvgSq).lora]
        : opt.expAvg.size + opt.expAvgSq.size > 0
          ? [hfToMegatron(this.cfg, opt.expAvg), hfToMegatron(this.cfg, opt.expAvgSq)]
          : null;
    const El = this.cfg.moe ? this.cfg.moe.numExperts / this.sizes.ep : 0;
    const epIndex = this.dpRank % this.sizes.ep;
    const localOf = (u: Unit, full: Map<string, HostParam>): Float32Array | undefined => {
      if (u.lora) {
        const h = full.get(u.name);
        return h && loraSlice(u.lora, h, this.sizes.tp, this.tpRank, this.sizes.ep, epIndex);
      }
      return u.group === 'dense'
        ? tpSlice(u.spec!, full.get(u.name)!, this.sizes.tp, this.tpRank).data
        : stackExperts(full, u.expert!.layer, u.expert!.fc, epIndex * El, El);
    };
    await this.writeUnits((u) => localOf(u, u.lora ? sp.lora : params), moments && [(u) => localOf(u, moments[0]!), (u) => localOf(u, moments[1]!)], opt?.step);
  }

  /**
   * Collective: this rank's pieces of each group of the HF folder `dir` with the placements
   * of the initial load (load-shards.ts: tp / ep shards, the rest replicated). LoRA adapters
   * (and their moments) are small and come whole to every rank; the base in pieces.
   */
  async loadShards(dir: string, groups: ShardGroups, opts: HfLoadOptions = {}): Promise<Array<Map<string, HostShard>>> {
    const whole = this.lora && new Map(loraParamSpecs(this.cfg, this.lora.adapters.config).map((s) => [s.name, s.shape] as const));
    return loadMegatronHfGroups(dir, this.cfg, this.mesh.parent, this.sizes, { ...groups, ...(whole ? { whole } : {}) }, opts);
  }

  /**
   * Collective: as loadState, from this rank's HF-named pieces (loadShards), laid out as
   * create() lays out loadMegatronShards()'s; the host never holds another rank's shard.
   * An empty moment map (no optimizer step yet) starts the moments at zero. LoRA adapters
   * come whole (by PEFT name) and are sliced as loadState slices them.
   */
  async loadShardedState(state: ShardedState): Promise<void> {
    const loraNames = new Set(this.lora?.adapters.names ?? []);
    const split = (m: ReadonlyMap<string, HostShard>) => {
      const base = new Map<string, HostShard>(),
        lora = new Map<string, HostParam>();
      for (const [n, p] of m) {
        if (loraNames.has(n)) lora.set(n, { shape: p.shape, data: p.data });
        else base.set(n, p);
      }
      return { base, lora };
    };
    let problem: string | null = null;
    const attempt = (what: string, f: () => unknown) => {
      try {
        f();
      } catch (e) {
        problem ??= `${what}: ${(e as Error).message}`;
      }
    };
    const modelCheck = (m: ReadonlyMap<string, HostShard>) => () =>
      checkParamsAgainstConfig(
        [...m].map(([name, p]) => ({ name, shape: p.shape })),
        this.cfg,
      );
    const sp = split(state.params);
    attempt('params', modelCheck(sp.base));
    if (this.lora) attempt('LoRA adapters', () => this.lora!.adapters.checkHost(sp.lora));
    const opt = state.optimizer;
    const moments = opt && [split(opt.expAvg), split(opt.expAvgSq)];
    // Base moments: only without LoRA (its base is frozen), all or none (none: before the first step).
    const withBase = !this.lora && moments !== undefined && moments.some((m) => m.base.size > 0);
    if (withBase) moments!.forEach((m, k) => attempt(k ? 'exp_avg_sq' : 'exp_avg', modelCheck(m.base)));
    if ((await anyRank(this.mesh.parent, problem !== null)) || problem)
      throw new InvalidArgumentError(
        `MegatronStrategy.loadShardedState(): ${problem ?? 'another rank rejected its state (see its error)'}. HINT: pass what loadShards() returned on this rank, for the same model.`,
      );
    const epIndex = this.dpRank % this.sizes.ep;
    const local = (m: { base: ReadonlyMap<string, HostShard>; lora: ReadonlyMap<string, HostParam> }, base: boolean) => {
      const l = base ? megatronLocalFromHf(this.cfg, m.base, this.sizes) : null;
      return (u: Unit): Float32Array | undefined => {
        if (u.lora) {
          const h = m.lora.get(u.name);
          return h && loraSlice(u.lora, h, this.sizes.tp, this.tpRank, this.sizes.ep, epIndex);
        }
        return l?.get(u.name, u.var.value.shape).data;
      };
    };
    const momentsOf = moments && (this.lora || withBase) ? ([local(moments[0]!, withBase), local(moments[1]!, withBase)] as const) : null;
    await this.writeUnits(local(sp, true), momentsOf, opt?.step);
  }

  /** Writes each unit's local data (and moments when given; zeros when `step` is set without them); `step` restores the count. */
  private async writeUnits(
    paramOf: (u: Unit) => Float32Array | undefined,
    momentsOf: readonly [(u: Unit) => Float32Array | undefined, (u: Unit) => Float32Array | undefined] | null,
    step: number | undefined,
  ): Promise<void> {
    const { stream } = this;
    const write = (dst: Tensor, data: Float32Array | undefined) => {
      if (!data) return fill(dst, 0, { stream });
      const t = Tensor.fromArray(this.mesh.device, data, dst.shape, { stream });
      copy(dst, t, { stream });
      t.release();
    };
    for (const u of this.units) {
      write(u.var.value, paramOf(u));
      if (step === undefined || !u.var.requiresGrad) continue;
      u.m ??= Tensor.zeros(this.mesh.device, u.var.value.shape, 'fp32', { stream });
      u.v ??= Tensor.zeros(this.mesh.device, u.var.value.shape, 'fp32', { stream });
      if (momentsOf) {
        write(u.m, momentsOf[0](u));
        write(u.v, momentsOf[1](u));
      } else {
        fill(u.m, 0, { stream });
        fill(u.v, 0, { stream });
      }
    }
    if (step !== undefined) this.step = step;
    this.micro = 0;
    await stream.synchronize();
  }

  release(): void {
    for (const u of this.units) {
      u.var.value.release();
      u.m?.release();
      u.v?.release();
    }
    this.grads.release();
    this.epComm.destroy();
    this.edpComm.destroy();
    this.mesh.destroy();
  }
}

/** The unit name of one MoE layer's stacked local experts. */
export { expertUnitName };

/** Checks the LoRA options before any collective (every rank fails the same way). */
function prepareLora(o: MegatronOptions) {
  if (o.linearHook) {
    throw new InvalidArgumentError(
      'MegatronStrategy.create(): pass either `lora` or `linearHook`, not both (LoRA installs its own linear hook). HINT: drop linearHook.',
    );
  }
  const adapters = new LoraAdapters(o.cfg, o.lora!.config);
  const host = o.lora!.params ?? adapters.initHost();
  adapters.checkHost(host);
  return { adapters, host, shards: loraShardSpecs(loraParamSpecs(o.cfg, adapters.config)) };
}
