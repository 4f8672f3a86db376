/**
 * The rollout-worker actor: one vLLM-like engine (src/rollout/engine.ts) per engine rank,
 * a member of one tensor-parallel replica. The controller calls every rank of a
 * replica with the same prompts (the engine's collectives need all of them) and reads
 * the result from any of them (tokens and log-probs are identical on every TP rank).
 */
import type { Communicator } from '../runtime/comm/comm.js';
import { InvalidArgumentError, InvalidStateError } from '../runtime/errors.js';
import type { RankContext } from '../runtime/actor-system/rank-context.js';
import type { ModelConfig } from '../model/config.js';
import { RolloutEngine, type EngineDtype, type GenerateResult, type SamplingParams } from '../rollout/index.js';

export interface RolloutActorOptions {
  /** KV-cache rows (largest generate batch). */
  maxBatch: number;
  /** KV-cache positions (prompt + generated tokens). */
  maxSeqLen: number;
  /** Engine weight precision (default float32; see src/rollout/weight-dtype.ts). */
  dtype?: EngineDtype;
}

export class RolloutActor {
  #engine: RolloutEngine | null = null;
  /** Index of this rank's replica and its rank inside the replica. */
  replica = 0;
  tpRank = 0;

  constructor(private readonly ctx: RankContext) {}

  /** Local setup with the replica's tensor-parallel communicator (null for tp = 1). */
  setupOn(cfg: ModelConfig, tp: Communicator | null, replica: number, opts: RolloutActorOptions): RolloutEngine {
    if (this.#engine) throw new InvalidArgumentError(`RolloutActor on rank ${this.ctx.rank} is already set up.`);
    this.#engine = RolloutEngine.create(cfg, {
      device: this.ctx.device,
      ...(tp ? { tp } : {}),
      maxBatch: opts.maxBatch,
      maxSeqLen: opts.maxSeqLen,
      ...(opts.dtype ? { dtype: opts.dtype } : {}),
    });
    this.replica = replica;
    this.tpRank = tp?.rank ?? 0;
    return this.#engine;
  }

  get engine(): RolloutEngine {
    if (!this.#engine) throw new InvalidStateError('The rollout worker is not set up. HINT: call setup() (or setupOn()) on every engine rank first.');
    return this.#engine;
  }

  generate(prompts: number[][], params: SamplingParams): Promise<GenerateResult> {
    return this.engine.generate(prompts, params);
  }

  computeLogprobs(ids: number[][], temperature: number): Promise<number[][]> {
    return this.engine.computeLogprobs(ids, { temperature });
  }

  sleep(level: 1 | 2): Promise<void> {
    return this.engine.sleep(level);
  }

  wake(): void {
    this.engine.wake();
  }

  info(): { rank: number; replica: number; tpRank: number; deviceBytes: number } {
    return { rank: this.ctx.rank, replica: this.replica, tpRank: this.tpRank, deviceBytes: this.engine.deviceBytes() };
  }

  shutdown(): void {
    this.#engine?.release();
    this.#engine = null;
  }
}
