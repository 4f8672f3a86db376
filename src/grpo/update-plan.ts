/**
 * How one rollout batch becomes optimizer steps (TRL's num_iterations / steps_per_generation /
 * gradient_accumulation_steps, verl's ppo_epochs / ppo_mini_batch_size):
 *
 *   for iteration in 1..numIterations (μ):           the same rollout, reused
 *     for mini-batch in 1..stepsPerGeneration:       one optimizer step each, rows in order
 *       for micro-batch in 1..gradientAccumulationSteps: forward/backward, gradients summed
 *
 * Old log-probs are those of the policy that sampled, computed once per rollout; with one
 * update per rollout (μ = 1, one mini-batch) the policy being trained is that policy, so
 * the trainer's extra forward pass is skipped and the ratio is exactly 1 (TRL does the same).
 * Each micro-batch is normalised over its mini-batch (rows, response tokens), so
 * accumulating micro-batches gives the gradient of the whole mini-batch.
 */
import { ConfigError } from '../runtime/errors.js';
import { IGNORE_INDEX } from '../model/labels.js';
import type { TrainBatch } from '../train/strategy.js';

export interface UpdateShape {
  /** Rows of the rollout batch. */
  rows: number;
  numIterations: number;
  stepsPerGeneration: number;
  gradientAccumulationSteps: number;
  /** Data-parallel trainer ranks: every micro-batch splits evenly over them. */
  dp: number;
}

export interface MiniBatchPlan {
  iteration: number;
  index: number;
  /** Row range [start, end) of the rollout batch. */
  rows: [number, number];
  micro: Array<[number, number]>;
}

/** Every optimizer step of one rollout, in order; ConfigError when the rows do not split. */
export function updatePlan(s: UpdateShape): MiniBatchPlan[] {
  const parts = s.stepsPerGeneration * s.gradientAccumulationSteps;
  if (s.rows % parts !== 0 || (s.rows / parts) % s.dp !== 0) {
    throw new ConfigError(
      `GRPO: the ${s.rows} rows of a rollout do not split into stepsPerGeneration (${s.stepsPerGeneration}) x gradientAccumulationSteps (${s.gradientAccumulationSteps}) micro-batches of a multiple of the ${s.dp} data-parallel trainer ranks. HINT: make promptsPerStep x numGenerations a multiple of ${parts * s.dp}.`,
      { rows: s.rows, stepsPerGeneration: s.stepsPerGeneration, gradientAccumulationSteps: s.gradientAccumulationSteps, dp: s.dp },
    );
  }
  const mini = s.rows / s.stepsPerGeneration,
    micro = mini / s.gradientAccumulationSteps;
  const out: MiniBatchPlan[] = [];
  for (let it = 0; it < s.numIterations; it++) {
    for (let m = 0; m < s.stepsPerGeneration; m++) {
      const r0 = m * mini;
      out.push({
        iteration: it,
        index: m,
        rows: [r0, r0 + mini],
        micro: Array.from({ length: s.gradientAccumulationSteps }, (_, k) => [r0 + k * micro, r0 + (k + 1) * micro] as [number, number]),
      });
    }
  }
  return out;
}

/** Whether the trainer must compute old log-probs (more than one update per rollout). */
export function needsOldLogprobs(s: Pick<UpdateShape, 'numIterations' | 'stepsPerGeneration'>): boolean {
  return s.numIterations > 1 || s.stepsPerGeneration > 1;
}

/** Rows [r0, r1) of a batch (a view of the same memory). */
export function sliceRows(b: TrainBatch, r0: number, r1: number): TrainBatch {
  const S = b.seqLen;
  return { inputIds: b.inputIds.subarray(r0 * S, r1 * S), targets: b.targets.subarray(r0 * S, r1 * S), batch: r1 - r0, seqLen: S };
}

/** Rows [r0, r1) of a per-token [B·S] array. */
export function sliceTokens(a: Float32Array, seqLen: number, r0: number, r1: number): Float32Array {
  return a.subarray(r0 * seqLen, r1 * seqLen);
}

/** Response tokens (targets that are not IGNORE_INDEX) of a batch. */
export function responseTokens(b: TrainBatch): number {
  let n = 0;
  for (const t of b.targets) if (t !== IGNORE_INDEX) n++;
  return n;
}
