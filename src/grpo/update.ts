/**
 * The policy update of one GRPO step (the controller's side): old log-probs once per
 * rollout when more than one update uses it, then the optimizer steps of update-plan.ts,
 * each a `lossSteps('grpo', micro-batches)` call on every trainer rank with the
 * learning rate of its place in the schedule. Returns what the step logs: loss and
 * gradient norm averaged over its optimizer steps, the loss's stats summed over all of them.
 */
import type { ActorMesh } from '../runtime/actor-system/actor-mesh.js';
import type { TrainStepResult } from '../actors/trainer.js';
import type { TrainerActor } from '../actors/trainer.js';
import type { TrainBatch } from '../train/strategy.js';
import { lrAt, type LrSchedule } from '../train/lr-schedule.js';
import type { GrpoBatchData, GrpoLossOptions } from './loss.js';
import { needsOldLogprobs, responseTokens, sliceRows, sliceTokens, updatePlan, type UpdateShape } from './update-plan.js';
import { assembleRows } from './rollout-batch.js';

export interface RolloutBatch {
  batch: TrainBatch;
  advantages: Float32Array;
  /** The engine's log-probs of the sampled tokens, aligned to the targets. */
  engineLogprobs: Float32Array;
  /** Reference log-probs when the KL is a loss term. */
  refLogprobs?: Float32Array;
  /** Old-policy log-probs when the caller already has them (KL in the reward needs them first). */
  oldLogprobs?: Float32Array;
}

export interface UpdateResult {
  loss: number;
  gradNorm: number;
  /** Learning rate of the last optimizer step. */
  lr: number;
  optimizerSteps: number;
  stats: Record<string, number>;
  /** Whether old log-probs were computed by the trainer (false: ratio 1 by construction). */
  recomputedOld: boolean;
}

export interface UpdateOptions {
  shape: Omit<UpdateShape, 'rows'>;
  loss: GrpoLossOptions;
  schedule: LrSchedule;
  /** Index of the first optimizer step of this update in the schedule. */
  firstStep: number;
  temperature: number;
}

/** Rank 0's result of `lossSteps('grpo', micro, opts)` on every trainer rank, made some other way (the driver: with the weight sync). */
export type LossStepsCall = (micro: Array<{ batch: TrainBatch; data: GrpoBatchData }>, opts: Record<string, unknown>) => Promise<TrainStepResult>;

/** `last`: how the update's last optimizer step is called (default: lossSteps on every trainer rank, like the others). */
export async function policyUpdate(trainers: ActorMesh<TrainerActor>, r: RolloutBatch, o: UpdateOptions, last?: LossStepsCall): Promise<UpdateResult> {
  const { batch } = r;
  const plan = updatePlan({ ...o.shape, rows: batch.batch });
  const recompute = r.oldLogprobs === undefined && needsOldLogprobs(o.shape);
  const old = r.oldLogprobs ?? (recompute ? assembleRows(batch, await trainers.call('computeLogprobs', batch, o.temperature)) : undefined);
  const S = batch.seqLen;
  const results: TrainStepResult[] = [];
  let k = o.firstStep;
  const each: LossStepsCall = async (micro, opts) => (await trainers.call('lossSteps', 'grpo', micro, opts))[0]!;
  for (const [i, mb] of plan.entries()) {
    const norm = { rows: mb.rows[1] - mb.rows[0], tokens: responseTokens(sliceRows(batch, mb.rows[0], mb.rows[1])) };
    const micro = mb.micro.map(([a, b]) => {
      const data: GrpoBatchData = {
        advantages: r.advantages.subarray(a, b),
        engineLogprobs: sliceTokens(r.engineLogprobs, S, a, b),
        norm,
        ...(old ? { oldLogprobs: sliceTokens(old, S, a, b) } : {}),
        ...(r.refLogprobs ? { refLogprobs: sliceTokens(r.refLogprobs, S, a, b) } : {}),
      };
      return { batch: sliceRows(batch, a, b), data };
    });
    const call = last && i === plan.length - 1 ? last : each;
    results.push(await call(micro, { ...o.loss, lr: lrAt(o.schedule, k++) }));
  }
  const stats: Record<string, number> = {};
  for (const tr of results) for (const [key, v] of Object.entries(tr.stats ?? {})) stats[key] = (stats[key] ?? 0) + v;
  const mean = (f: (t: TrainStepResult) => number) => results.reduce((a, t) => a + f(t), 0) / results.length;
  return {
    loss: mean((t) => t.loss),
    gradNorm: mean((t) => t.gradNorm),
    lr: results.at(-1)!.lr,
    optimizerSteps: results.length,
    stats,
    recomputedOld: recompute,
  };
}
