/**
 * The contract every training strategy keeps (single device, `fsdp2`, `megatron`).
 *
 * A strategy owns one rank's share of the model (parameters, gradients, AdamW
 * moments) and runs forward + backward over this rank's rows of a GLOBAL batch.
 * Every method that talks to other ranks is collective: all ranks of the
 * strategy's mesh call it, in the same order, with the same arguments (the same
 * global batch included). What a strategy returns never depends on how it is
 * sharded: losses, gradient norms and gathered state are the global values, with
 * HF names and the Transformers-5 fused expert layout, so the results of two
 * strategies on the same seed and batch can be compared directly.
 */
import type { Communicator } from '../runtime/comm/comm.js';
import type { Tensor } from '../runtime/device/device-index.js';
import type { Tape, Var } from '../model/autograd.js';
import type { ModelConfig } from '../model/config.js';
import type { AdamWHyper, HostParam } from '../model/param-store.js';
import type { WeightSource } from '../parallel/weight-sources.js';
import type { AdapterSources } from '../parallel/adapter-sources.js';
import type { HostShard } from '../parallel/sharded-load.js';
import type { HfLoadOptions } from './load-hf-shards.js';

export const STRATEGY_KINDS = ['single', 'fsdp2', 'megatron'] as const;
export type StrategyKind = (typeof STRATEGY_KINDS)[number];

/** A global batch of token rows (every rank passes the same one). */
export interface TrainBatch {
  /** int32 [batch·seqLen], row-major. */
  inputIds: Int32Array;
  /** int32 [batch·seqLen], next-token targets; IGNORE_INDEX (-100) where no loss is taken. */
  targets: Int32Array;
  batch: number;
  seqLen: number;
  /**
   * int32 [batch·seqLen] 2-D padding mask (1 = token, 0 = pad), optional: rows without one are taken
   * as right-padded, which causal attention handles exactly. Qwen3.5 uses it to keep left pads out
   * of its Gated DeltaNet layers; a model with attention refuses left padding (no key mask).
   */
  attentionMask?: Int32Array;
  /**
   * Whether each rank computes its rows at the width they need (default true; rows.ts
   * localRows). false: at the full seqLen, the reference the trim is tested against.
   */
  trimPadding?: boolean;
}

/** The rows of the global batch this rank computes (its data-parallel share). */
export interface LocalRows {
  /** First global row. */
  row0: number;
  /** Number of rows. */
  rows: number;
  /**
   * This rank's width: the global seqLen trimmed to 1 + the last target position over its rows
   * (rows.ts trimmedWidth). Every local per-token array is [rows·seqLen].
   */
  seqLen: number;
  /** The global batch's seqLen (the row stride of global [batch·seqLen] arrays); absent: seqLen. */
  stride?: number;
  inputIds: Int32Array;
  targets: Int32Array;
  /** The rows of TrainBatch.attentionMask, when it has one. */
  attentionMask?: Int32Array;
}

/**
 * A loss over this rank's rows: the per-token loss `perToken` [rows·seqLen] (a Var
 * on the tape) and `weights`, d(global objective)/d(perToken) per token, so the
 * gradient of the objective is that of Σ weights·perToken summed over every
 * data-parallel rank. The weights carry the global normalisation (e.g. 1 / tokens of
 * the global batch), which is why gradients only need summing across ranks.
 *
 * A loss may read its per-token values on the host to compute the weights (GRPO's
 * clipped surrogate does: weights depend on the probability ratio), so it may be
 * async. `value` is this rank's share of the objective when it is not
 * Σ weights·perToken (a surrogate); `stats` are local sums (e.g. clipped tokens, KL)
 * that the strategy sums over data-parallel ranks into StepLoss.stats.
 */
export interface LossTerms {
  perToken: Var;
  weights: Float32Array;
  value?: number;
  stats?: Record<string, number>;
  /**
   * The weight of this call's router load-balancing loss in its optimizer step (when the config
   * asks for it, router-aux-step.ts): the call's share of the step's normalisation, e.g. its rows
   * over the step's rows when micro-batches are accumulated; default 1 (the call is the step).
   */
  auxScale?: number;
  /** This rank's tokens with a non-zero weight, when perToken holds more than one term per token (default: counted from weights). */
  tokens?: number;
}
export type LossFn = (tape: Tape, logits: Var, rows: LocalRows, global: TrainBatch) => LossTerms | Promise<LossTerms>;

export interface StepLoss {
  /** The global objective Σ weights·perToken over every rank. */
  loss: number;
  /** Tokens with a non-zero weight in the global batch. */
  tokens: number;
  /** The loss's `stats`, summed over data-parallel ranks. */
  stats?: Record<string, number>;
}

/** Host state gathered or loaded by HF name: parameters, gradients, AdamW moments. */
export const STATE_KINDS = ['params', 'grads', 'exp_avg', 'exp_avg_sq'] as const;
export type StateKind = (typeof STATE_KINDS)[number];

export interface FullState {
  params: Map<string, HostParam>;
  /** AdamW first and second moments and the optimizer step count (absent: fresh optimizer). */
  optimizer?: { step: number; expAvg: Map<string, HostParam>; expAvgSq: Map<string, HostParam> };
}

/**
 * One rank's pieces of the state as the sharded loader keeps them: HostShard maps by HF
 * name (fused experts), placed as the strategy's loadShards() places them, so no rank
 * holds another rank's piece. A moment map may be empty (saved before any optimizer step).
 */
export interface ShardedState {
  params: ReadonlyMap<string, HostShard>;
  optimizer?: { step: number; expAvg: ReadonlyMap<string, HostShard>; expAvgSq: ReadonlyMap<string, HostShard> };
}

/** Which tensors of a folder loadShards() reads: one group per name prefix ('' = plain HF names). */
export interface ShardGroups {
  groups: readonly string[];
  /** A folder without any tensor gives empty groups (no optimizer state yet). */
  optional?: boolean;
}

export interface TrainStrategy {
  readonly kind: StrategyKind;
  readonly cfg: ModelConfig;
  /** e.g. 'single', 'dp8', 'tp2dp2', 'ep2'. */
  readonly layout: string;
  /** Ranks the strategy spans. */
  readonly ranks: number;
  /** Optimizer steps taken (restored by loadState). */
  readonly optimizerSteps: number;

  /**
   * Forward + backward over this rank's rows of `batch`; gradients ACCUMULATE into
   * the parameter gradients and are fully reduced across ranks when the promise
   * resolves. `loss` defaults to token-mean cross-entropy over the global batch.
   */
  forwardBackward(batch: TrainBatch, loss?: LossFn): Promise<StepLoss>;
  /** Eval-mode forward and loss over this rank's rows: no dropout, no backward, gradients untouched. */
  forward(batch: TrainBatch, loss?: LossFn): Promise<StepLoss>;
  /** Zeroes every gradient. */
  zeroGrad(): void;
  /** The global L2 norm of the gradients; scales them to `maxNorm` when it is larger. */
  clipGradNorm(maxNorm: number | null): Promise<number>;
  /** One AdamW step on every trainable parameter (each rank on what it owns). */
  optimizerStep(hp: AdamWHyper): void;
  /** The full (unsharded) state of one kind by HF name, fused experts; returned on every rank. */
  gatherState(kind: StateKind): Promise<Map<string, HostParam>>;
  /** Replaces parameters (and optimizer state when given) from full HF-named host state; each rank keeps its shard. */
  loadState(state: FullState): Promise<void>;
  /**
   * This rank's pieces of each group of the HF-named folder `dir` through the sharded
   * loader, with the placements the strategy's own initial load uses (collective; a bad
   * folder throws one CheckpointFormatError on every rank). LoRA adapters come whole
   * (Replicate: they are small). Absent on the single strategy: use loadState.
   */
  loadShards?(dir: string, groups: ShardGroups, opts?: HfLoadOptions): Promise<Array<Map<string, HostShard>>>;
  /** As loadState, from this rank's pieces as loadShards() returns them (collective). */
  loadShardedState?(state: ShardedState): Promise<void>;
  /** LoRA adapters alone, full, by PEFT name (for adapter-only weight sync); throws when the strategy has no LoRA. */
  loraState?(): Promise<Map<string, HostParam>>;
  /**
   * What this rank holds of the model weights, in the weight-source contract
   * (parallel/weight-sources.ts): placements, local device views (owned by the strategy)
   * and HF mappings. The weight sync reads these, never the strategy's inside.
   */
  weightSources(): WeightSource[];
  /**
   * The LoRA adapters in the weight-source contract (parallel/adapter-sources.ts), what an
   * adapter-only weight sync reads; null when the strategy has none.
   */
  adapterSources(): AdapterSources | null;
  /** The communicators the strategy runs collectives on (for the flight recorder and comm-time accounting). */
  readonly communicators?: readonly Communicator[];
  /** Frees every device tensor the strategy holds. */
  release(): void;
}

/** Device tensors a strategy hands to code outside it (e.g. the weight-sync coordinator). */
export type LocalTensors = Map<string, Tensor>;
