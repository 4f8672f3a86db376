/**
 * RolloutEngine: a vLLM-like inference engine on one rank of a tensor-parallel group
 * (tp = 1, 2, 4 over a `tp` communicator; every rank of the group makes the same calls).
 *
 * Weights enter only through a session (weight-session.ts), one open at a time:
 * beginReload() gives a ReloadSession that slices HF tensors (or local shards) for this
 * rank into the preprocessed packed layout, and whose finish() turns them into the
 * runtime layout exactly once; beginDirect() gives a DirectSession that writes runtime
 * parameters already in the processed layout (weight sync, LoRA adapters). While a
 * session is open, generation, scoring and sleep are refused. checksums() hashes the
 * runtime bytes. See runtime-params.ts for names, shapes and states.
 *
 * Generation: a batch of prompts of different lengths is right-padded to the longest
 * (each row's real length is kept; causal attention never lets a real token see a pad,
 * and logits are taken at each row's own last token). Prefill writes the KV cache (for
 * Qwen3.5 only its full-attention layers have one; its Gated DeltaNet layers keep each row's
 * conv and recurrent state in gdn-state-cache.ts instead, taken at the row's own length), then
 * every decode step feeds the sampled tokens at each row's own next position. Sampling is
 * K.sample (Philox, seed / step / row), so the same seed gives the same tokens on any tp
 * size. Tokens and log-probs are broadcast from tp rank 0 so every rank returns the same.
 * A row stops after its EOS or at maxTokens; the batch stops when every row has. One host
 * read per decode step (the sampled tokens, to check EOS) — the scheduler's only sync; each
 * step's log-probs are collected on the device and read (and broadcast) once at the end.
 * Log-probs follow the convention in sampling-params.ts.
 */
import { Tensor, type Device, type Stream } from '../runtime/device/device-index.js';
import type { Communicator } from '../runtime/comm/comm.js';
import { InvalidArgumentError, InvalidStateError } from '../runtime/errors.js';
import { checkOptions } from '../runtime/device/device.js';
import { describe } from '../runtime/device/dtype.js';
import { copy } from '../runtime/device/ops.js';
import { viewOf } from '../runtime/device/views.js';
import { isQwen35, type ModelConfig } from '../model/config.js';
import * as K from '../model/kernels/index.js';
import { forward, type ForwardContext, type ForwardInput } from './forward.js';
import { forwardQwen35 } from './forward-qwen35.js';
import { GdnStateCache } from './gdn-state-cache.js';
import { gdnLocal } from './gdn-shard.js';
import { kvLayerIndex } from './qwen35-layout.js';
import { KvCache } from './kv-cache.js';
import { hfLoadPlan, type HfEntry } from './loader.js';
import { runtimeParamSpecs, RuntimeParams, type LayoutState } from './runtime-params.js';
import { checkSequences, logprobTemperature, resolveSampling, type ResolvedSampling, type SamplingParams } from './sampling-params.js';
import { sleepParams, wakeParams, type SleepLevel } from './sleep.js';
import { tpShard, type TpShard } from './tp-shard.js';
import { weightSlots, type SlotDescriptor } from './weight-slots.js';
import { checkEngineDtype, type EngineDtype } from './weight-dtype.js';
import { DirectSession, ReloadSession, type SessionHost, type WeightSession } from './weight-session.js';

export interface RolloutEngineOptions {
  device: Device;
  /** Stream for all work (default the device's default stream of this thread). */
  stream?: Stream;
  /** The tensor-parallel group (size 1, 2 or 4 for the tiny models); omit for tp = 1. */
  tp?: Communicator;
  /** KV cache rows (largest batch). Default 8. */
  maxBatch?: number;
  /** KV cache positions (prompt + generated). Default config max_position_embeddings, else 128. */
  maxSeqLen?: number;
  /** Deadline of every device wait of the engine (host reads, sleep), in ms. Default 300000. */
  waitTimeoutMs?: number;
  /**
   * Weight precision (weight-dtype.ts): 'float32' (default) or 'bfloat16' (matmul weights
   * in bf16, half the bytes; norms, router, activations, sampling stay fp32).
   */
  dtype?: EngineDtype;
}

export interface GenerateResult {
  /** Generated tokens per prompt (EOS included when reached). */
  tokens: number[][];
  /** Log-prob of each generated token (see sampling-params.ts for the temperature). */
  logprobs: number[][];
  finishReasons: Array<'eos' | 'length'>;
}

export class RolloutEngine {
  readonly shard: TpShard;
  readonly params: RuntimeParams;
  readonly stream: Stream;
  /** Weight precision (weight-dtype.ts); each runtime parameter's dtype is in its spec. */
  readonly dtype: EngineDtype;
  private readonly plan: Map<string, HfEntry>;
  private readonly kv: KvCache;
  /** Qwen3.5: the Gated DeltaNet layers' conv and recurrent states (null for Qwen3). */
  private readonly gdn: GdnStateCache | null;
  private readonly comm: Communicator | null;
  private sleepLevel: SleepLevel | null = null;
  private busy: string | null = null;
  /** The open weight session, if any (one at a time). */
  private session: WeightSession | null = null;
  private readonly timeoutMs: number;

  private constructor(
    readonly cfg: ModelConfig,
    readonly device: Device,
    opts: RolloutEngineOptions,
  ) {
    this.comm = opts.tp ?? null;
    this.shard = tpShard(cfg, this.comm?.size ?? 1, this.comm?.rank ?? 0);
    this.stream = opts.stream ?? device.defaultStream;
    this.dtype = checkEngineDtype(opts.dtype, 'RolloutEngine.create() dtype');
    this.params = new RuntimeParams(device, runtimeParamSpecs(cfg, this.shard, this.dtype));
    this.plan = hfLoadPlan(cfg, this.shard);
    const posInt = (v: unknown, name: string, dflt: number) => {
      const x = v ?? dflt;
      if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 1)
        throw new InvalidArgumentError(`Expected a positive integer for ${name} but received ${describe(x)}.`, { argument: name });
      return x;
    };
    this.timeoutMs = posInt(opts.waitTimeoutMs, 'waitTimeoutMs', 300_000);
    const maxBatch = posInt(opts.maxBatch, 'maxBatch', 8);
    const kvLayers = kvLayerIndex(cfg);
    this.kv = new KvCache(device, {
      layers: kvLayers.filter((k) => k >= 0).length,
      maxBatch,
      maxSeqLen: posInt(opts.maxSeqLen, 'maxSeqLen', cfg.maxPositionEmbeddings ?? 128),
      kvHeads: this.shard.kvHeadsLocal,
      headDim: cfg.headDim,
    });
    // Each TP rank keeps the conv and recurrent states of its own GDN heads.
    const lin = isQwen35(cfg) ? gdnLocal(cfg, this.shard) : null;
    this.gdn = lin
      ? new GdnStateCache(device, {
          layers: kvLayers.length - this.kv.shape.layers,
          maxBatch,
          channels: lin.C,
          kernel: lin.K,
          valueHeads: lin.Hv,
          keyHeadDim: lin.Dk,
          valueHeadDim: lin.Dv,
        })
      : null;
  }

  static create(cfg: ModelConfig, opts: RolloutEngineOptions): RolloutEngine {
    checkOptions(opts, ['device', 'stream', 'tp', 'maxBatch', 'maxSeqLen', 'waitTimeoutMs', 'dtype'], 'RolloutEngine.create()');
    if (!opts?.device) throw new InvalidArgumentError('RolloutEngine.create() requires { device }.', { argument: 'device' });
    return new RolloutEngine(cfg, opts.device, opts);
  }

  /** Device bytes held by weights, KV cache and (Qwen3.5) GDN state cache now. */
  deviceBytes(): number {
    return this.params.deviceBytes() + this.kv.deviceBytes() + (this.gdn?.deviceBytes() ?? 0);
  }

  get asleep(): SleepLevel | null {
    return this.sleepLevel;
  }

  /**
   * This rank's weight slots (weight-slots.ts): per HF tensor and runtime parameter, the
   * region held, the transform and the parameter's layout state, as plain JSON. Allowed
   * while a session is open (a sync plans from them inside its session).
   */
  weightSlots(): SlotDescriptor[] {
    return weightSlots(this.cfg, this.shard, this.params, this.plan);
  }

  /** Layout state of every runtime parameter. */
  layoutStates(): Map<string, LayoutState> {
    return new Map([...this.params.params].map(([n, p]) => [n, p.state]));
  }

  /**
   * State checks of every entry point: nothing while a generate() / sleep() runs; nothing
   * but reads (checksums(), which may inspect a reload mid-way) while a weight session is
   * open; only reads and wake() while asleep.
   */
  private enter(what: string, allowAsleep = false, allowSession = false): void {
    if (this.busy) throw new InvalidStateError(`${what} called while ${this.busy} is running. HINT: await it first.`, { busy: this.busy });
    if (this.session && !allowSession) {
      throw new InvalidStateError(`${what} called while ${this.session.label} is open. HINT: finish() it first (or abort() it when it failed).`, {
        session: this.session.kind,
      });
    }
    if (!allowAsleep && this.sleepLevel !== null) {
      throw new InvalidStateError(`${what} called while the engine is asleep (level ${this.sleepLevel}). HINT: call wake() first.`, { level: this.sleepLevel });
    }
  }

  /**
   * Opens a full reload in the preprocessed layout (see weight-session.ts); its finish()
   * runs the post-load processing exactly once. Refused while another session is open.
   */
  beginReload(): ReloadSession {
    this.enter('beginReload()');
    return this.open(new ReloadSession(this.sessionHost()));
  }

  /** Opens direct writes in the processed (runtime) layout (see weight-session.ts); no processing follows. */
  beginDirect(): DirectSession {
    this.enter('beginDirect()');
    return this.open(new DirectSession(this.sessionHost()));
  }

  private open<S extends WeightSession>(s: S): S {
    this.session = s;
    return s;
  }

  private sessionHost(): SessionHost {
    return {
      cfg: this.cfg,
      device: this.device,
      stream: this.stream,
      params: this.params,
      plan: this.plan,
      closed: (s) => {
        if (this.session === s) this.session = null;
      },
    };
  }

  /** Checksums of the runtime parameters' local bytes (see runtimeChecksum). */
  checksums(): ReturnType<RuntimeParams['checksums']> {
    this.enter('checksums()', true, true);
    return this.params.checksums(this.stream, this.timeoutMs);
  }

  private ctx(): ForwardContext {
    return { cfg: this.cfg, params: this.params, shard: this.shard, comm: this.comm, stream: this.stream };
  }

  /**
   * The model's forward: Qwen3.5 takes the rows' real lengths (its GDN padding mask) and,
   * when generating, the GDN state cache beside the KV cache.
   */
  private forward(inp: ForwardInput, rowLens: readonly number[], scratch: Tensor[], pending: Promise<void>[]): Tensor {
    if (!isQwen35(this.cfg)) return forward(this.ctx(), inp, scratch, pending);
    return forwardQwen35(this.ctx(), { ...inp, rowLens, ...(inp.kv && this.gdn ? { gdn: this.gdn } : {}) }, scratch, pending);
  }

  /** tp rank 0's values on every rank (in place). */
  private fromLeader(t: Tensor, pending: Promise<void>[]): void {
    if (this.comm && this.shard.tpSize > 1) pending.push(this.comm.broadcast(t, t, 0, this.stream));
  }

  /** State checks run synchronously (a refused call has no side effect), then `body`. */
  private run<T>(what: string, body: () => Promise<T>): Promise<T> {
    this.enter(what);
    this.params.checkReadyForForward();
    this.busy = what;
    return body().finally(() => {
      this.busy = null;
    });
  }

  /** Right-padded ids / positions of sequences (pad id 0, positions 0..S-1 per row). */
  private upload(seqs: number[][], S: number, scratch: Tensor[]): { ids: Tensor; positions: Tensor } {
    const B = seqs.length;
    const ids = new Int32Array(B * S),
      pos = new Int32Array(B * S);
    seqs.forEach((s, b) => {
      ids.set(s, b * S);
      for (let t = 0; t < S; t++) pos[b * S + t] = t;
    });
    const up = (a: Int32Array) => {
      const t = Tensor.fromArray(this.device, a, [a.length], { stream: this.stream });
      scratch.push(t);
      return t;
    };
    return { ids: up(ids), positions: up(pos) };
  }

  /** Samples continuations of `prompts` (see the file header for padding, stopping and log-probs). */
  generate(prompts: number[][], params: SamplingParams): Promise<GenerateResult> {
    const sp = resolveSampling(params, this.cfg.vocabSize);
    const rows = checkSequences(prompts, this.cfg.vocabSize, 'prompts');
    const B = rows.length;
    // The per-row arrays here and in generateRows are built by push, never by map():
    // Array.prototype.map returns a PACKED array from the builtin but a HOLEY one once inlined into
    // optimised code, so the generate loop's keyed loads and destructurings deoptimised ("wrong
    // map") as soon as it (or its upload helper) was optimised, to be compiled again steps later.
    const lens: number[] = [];
    for (const r of rows) lens.push(r.length);
    const S = Math.max(...lens);
    this.kv.checkFits(B, S + sp.maxTokens - 1);
    return this.run('generate()', () => this.generateRows(rows, lens, S, sp));
  }

  /**
   * generate()'s body, a method rather than a closure made per call: V8 keeps a function's
   * optimised code only while some closure of it is alive, so the per-call closure's ~30 KB of
   * optimised code was dropped by any GC between two calls and compiled again steps later.
   */
  private async generateRows(rows: number[][], lens: number[], S: number, sp: ResolvedSampling): Promise<GenerateResult> {
    const B = rows.length;
    const { stream } = this;
    const out: GenerateResult = { tokens: [], logprobs: [], finishReasons: [] };
    const done: boolean[] = [];
    for (let b = 0; b < B; b++) {
      out.tokens.push([]);
      out.logprobs.push([]);
      out.finishReasons.push('length');
      done.push(false);
    }
    let finished = 0;
    let scratch: Tensor[] = [];
    const pending: Promise<void>[] = [];
    const up = (a: Int32Array) => {
      const t = Tensor.fromArray(this.device, a, [a.length], { stream });
      scratch.push(t);
      return t;
    };
    // Two small int32 arrays in one upload (one stream op, not one each): views of it.
    const upBoth = (a: Int32Array, b: Int32Array): [Tensor, Tensor] => {
      const both = new Int32Array(a.length + b.length);
      both.set(a);
      both.set(b, a.length);
      const all = up(both);
      return [viewOf(all, [a.length], 0), viewOf(all, [b.length], a.length)];
    };
    // Step t's log-probs go to row t on the device and are read once at the end: the host
    // reads only the tokens per step (EOS), one round trip per token instead of two.
    let lpAll: Tensor | null = null;
    try {
      lpAll = Tensor.empty(this.device, [sp.maxTokens, B]);
      let steps = 0;
      const batch = this.upload(rows, S, scratch);
      const [cachePos, outRows] = upBoth(
        new Int32Array(B),
        Int32Array.from(lens, (l, b) => b * S + l - 1),
      );
      let logits = this.forward(
        {
          // Spelled out, not ...batch: a spread's maps die with its last object (see linear() in model/functional.ts).
          ids: batch.ids,
          positions: batch.positions,
          batch: B,
          seqLen: S,
          ropeSeqLen: S,
          mode: 'prefill',
          kv: { cache: this.kv, cachePos },
          outRows,
        },
        lens,
        scratch,
        pending,
      );
      const cur: number[] = [];
      for (const l of lens) cur.push(l);
      for (let step = 0; step < sp.maxTokens; step++) {
        scratch.push(logits);
        const tokens = K.sample(logits, { stream, temperature: sp.temperature, topK: sp.topK, topP: sp.topP, seed: sp.seed, offset: step });
        const lp = K.tokenLogprobs(logits, tokens, { stream, temperature: logprobTemperature(sp.temperature) });
        scratch.push(tokens, lp);
        copy(viewOf(lpAll, [B], step * B), lp, { stream });
        steps = step + 1;
        this.fromLeader(tokens, pending);
        const [tok] = await Promise.all([tokens.toArray({ stream, timeoutMs: this.timeoutMs }), ...pending.splice(0)]);
        for (let b = 0; b < B; b++) {
          if (done[b]) continue;
          out.tokens[b]!.push(tok![b] as number);
          if (tok![b] === sp.eosTokenId || sp.stopTokenIds.has(tok![b] as number)) {
            done[b] = true;
            finished++;
            out.finishReasons[b] = 'eos';
          }
        }
        if (finished === B || step === sp.maxTokens - 1) break;
        // Decode: every row (finished ones too, ignored) feeds its token at its next position.
        const prev = scratch;
        scratch = [tokens];
        for (const t of prev) if (t !== tokens) t.release();
        // Row b's one new position is also where its key / value go in the cache.
        const [positions, lengths] = upBoth(
          Int32Array.from(cur),
          Int32Array.from(cur, (c) => c + 1),
        );
        logits = this.forward(
          {
            ids: tokens,
            positions,
            batch: B,
            seqLen: 1,
            ropeSeqLen: Math.max(...cur) + 1,
            mode: 'decode',
            kv: { cache: this.kv, cachePos: positions },
            lengths,
          },
          cur,
          scratch,
          pending,
        );
        for (let b = 0; b < B; b++) cur[b]!++;
      }
      // Row b generated its tokens at steps 0 .. tokens[b].length - 1.
      const lpSteps = viewOf(lpAll, [steps, B]);
      this.fromLeader(lpSteps, pending);
      const [lps] = await Promise.all([lpSteps.toArray({ stream, timeoutMs: this.timeoutMs }), ...pending.splice(0)]);
      for (let b = 0; b < B; b++) for (let t = 0; t < out.tokens[b]!.length; t++) out.logprobs[b]!.push(lps![t * B + b] as number);
      return out;
    } finally {
      await Promise.allSettled(pending);
      for (const t of scratch) t.release();
      lpAll?.release();
    }
  }

  /**
   * Per-token log-probs of given sequences: out[b][t] = log softmax(logits / temperature)
   * [ids[b][t + 1]] given ids[b][0..t] (length len - 1 per row). `temperature` (> 0) is
   * explicit so the trainer states what it compares against; generate() with temperature
   * 0 reports temperature-1 log-probs.
   */
  computeLogprobs(ids: number[][], options: { temperature: number }): Promise<number[][]> {
    checkOptions(options, ['temperature'], 'computeLogprobs()');
    const temperature = options?.temperature;
    if (typeof temperature !== 'number' || !(temperature > 0) || !Number.isFinite(temperature)) {
      throw new InvalidArgumentError(
        `computeLogprobs() requires { temperature } > 0 (the sampling temperature; 1 for greedy samples) but received ${describe(temperature)}.`,
        { argument: 'temperature' },
      );
    }
    const rows = checkSequences(ids, this.cfg.vocabSize, 'ids', 2);
    return this.run('computeLogprobs()', async () => {
      const { values, S } = await this.scoreRows(rows, (logits, targets, scratch) => {
        const lp = K.tokenLogprobs(logits, targets, { stream: this.stream, temperature });
        scratch.push(lp);
        return lp;
      });
      return rows.map((r, b) => Array.from(values.subarray(b * S, b * S + r.length - 1)));
    });
  }

  /** Prefill logits of each sequence, [len · V] row-major per sequence (for parity checks against the trainer's model). */
  prefillLogits(ids: number[][]): Promise<Float32Array[]> {
    const rows = checkSequences(ids, this.cfg.vocabSize, 'ids');
    const V = this.cfg.vocabSize;
    return this.run('prefillLogits()', async () => {
      const { values, S } = await this.scoreRows(rows, (logits) => logits);
      return rows.map((r, b) => values.slice(b * S * V, (b * S + r.length) * V));
    });
  }

  /** One prefill pass (no KV cache) over right-padded rows; `pick` makes the tensor read back (broadcast from tp rank 0). */
  private async scoreRows(
    rows: number[][],
    pick: (logits: Tensor, targets: Tensor, scratch: Tensor[]) => Tensor,
  ): Promise<{ values: Float32Array; S: number }> {
    const S = Math.max(...rows.map((r) => r.length));
    const scratch: Tensor[] = [];
    const pending: Promise<void>[] = [];
    try {
      const batch = this.upload(rows, S, scratch);
      const tgt = new Int32Array(rows.length * S).fill(K.IGNORE_INDEX);
      rows.forEach((r, b) => {
        for (let t = 0; t + 1 < r.length; t++) tgt[b * S + t] = r[t + 1]!;
      });
      const targets = Tensor.fromArray(this.device, tgt, [tgt.length], { stream: this.stream });
      scratch.push(targets);
      const logits = this.forward(
        { ...batch, batch: rows.length, seqLen: S, ropeSeqLen: S, mode: 'prefill' },
        rows.map((r) => r.length),
        scratch,
        pending,
      );
      scratch.push(logits);
      const t = pick(logits, targets, scratch);
      this.fromLeader(t, pending);
      const [values] = await Promise.all([t.toArray({ stream: this.stream, timeoutMs: this.timeoutMs }), ...pending.splice(0)]);
      return { values: values as Float32Array, S };
    } finally {
      await Promise.allSettled(pending);
      for (const t of scratch) t.release();
    }
  }

  /**
   * Level 1: weights, KV cache and GDN states to host memory, device memory freed. Level 2:
   * all dropped; after wake() generation refuses until weights are written again. The freed
   * memory is the device's to reuse at once; device.emptyCache() returns its pages to the OS.
   */
  async sleep(level: SleepLevel): Promise<void> {
    if (level !== 1 && level !== 2) throw new InvalidArgumentError(`Expected sleep level 1 or 2 but received ${describe(level)}.`, { argument: 'level' });
    this.enter('sleep()');
    this.busy = 'sleep()';
    try {
      await sleepParams(this.params, level, this.stream, this.timeoutMs);
      await this.kv.sleep(level, this.stream, this.timeoutMs);
      await this.gdn?.sleep(level, this.stream, this.timeoutMs);
      // Released buffers return to the pool once queued work on them has run: wait for it,
      // so device memory is free when sleep() resolves. The pool keeps their pages for the
      // device's next allocations (a colocated trainer's step); device.emptyCache() gives them
      // to the OS. Emptying here made every colocated step fault its activations in again.
      await this.stream.synchronize({ timeoutMs: this.timeoutMs });
      this.sleepLevel = level;
    } finally {
      this.busy = null;
    }
  }

  /** Device memory back; offloaded bytes restored (level 1) or parameters left 'dropped' (level 2). */
  wake(): void {
    this.enter('wake()', true);
    if (this.sleepLevel === null) throw new InvalidArgumentError('wake() called but the engine is not asleep.', {});
    wakeParams(this.params, this.stream);
    this.kv.wake(this.stream);
    this.gdn?.wake(this.stream);
    this.sleepLevel = null;
  }

  /** Frees every device tensor (the engine is unusable afterwards; an open session is aborted). */
  release(): void {
    if (this.session?.open) this.session.abort();
    for (const p of this.params.params.values()) {
      p.tensor?.release();
      p.tensor = null;
      p.state = 'dropped';
    }
    this.kv.release();
    this.gdn?.release();
  }
}
