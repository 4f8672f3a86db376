/**
 * The policy update of one GRPO step (the controller's side): old log-probs once per
 * rollout when more than one update uses it, then the optimizer steps of update-plan.ts,
 * each a `lossSteps('grpo', micro-batches)` call on every trainer rank with the
 * learning rate of its place in the schedule. Returns what the step logs: loss and
 * gradient norm averaged over its optimizer steps, the loss's stats summed over all of them.
 * The rows of each mini-batch are sorted by length first (row-order.ts), so each trainer
 * rank's rows trim to a width close to their own; every per-row array moves with its row and
 * nothing returned is per row.
 */
import type { ActorMesh } from '../runtime/actor-system/actor-mesh.js';
import type { TrainStepResult } from '../actors/trainer.js';
import type { TrainerActor } from '../actors/trainer.js';
import type { TrainBatch } from '../train/strategy.js';
import { lrAt, type LrSchedule } from '../train/lr-schedule.js';
import type { GrpoBatchData, GrpoLossOptions } from './loss.js';
import { needsOldLogprobs, responseTokens, sliceRows, sliceTokens, updatePlan, type UpdateShape } from './update-plan.js';
import { assembleRows } from './rollout-batch.js';
import { lengthOrder, paddedFraction, permuteBatch, permuteRows, tokenSlots } from './row-order.js';

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
  /** Share of the trainer's token slots that are padding over the update's micro-batches: at the batch's width, and as the ranks trim them. */
  paddedFraction: { untrimmed: number; trimmed: number };
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
export async function policyUpdate(trainers: ActorMesh<TrainerActor>, rollout: RolloutBatch, o: UpdateOptions, last?: LossStepsCall): Promise<UpdateResult> {
  const plan = updatePlan({ ...o.shape, rows: rollout.batch.batch });
  const r = sortedRollout(
    rollout,
    plan.map((mb) => mb.rows),
  );
  const { batch } = r;
  const recompute = r.oldLogprobs === undefined && needsOldLogprobs(o.shape);
  const old = r.oldLogprobs ?? (recompute ? assembleRows(batch, await trainers.call('computeLogprobs', batch, o.temperature)) : undefined);
  const S = batch.seqLen;
  const results: TrainStepResult[] = [];
  const slots = { needed: 0, trimmed: 0, full: 0 };
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
      const mb = sliceRows(batch, a, b);
      const t = tokenSlots(mb, (b - a) / o.shape.dp);
      for (const key of ['needed', 'trimmed', 'full'] as const) slots[key] += t[key];
      return { batch: mb, data };
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
    paddedFraction: paddedFraction(slots),
  };
}

/** The rollout with each of `ranges` (the mini-batches) sorted by row length, every per-row array moved with its row. */
export function sortedRollout(r: RolloutBatch, ranges: ReadonlyArray<readonly [number, number]>): RolloutBatch {
  const order = lengthOrder(r.batch, ranges);
  const S = r.batch.seqLen;
  const tokens = (a: Float32Array) => permuteRows(a, S, order);
  return {
    batch: permuteBatch(r.batch, order),
    advantages: permuteRows(r.advantages, 1, order),
    engineLogprobs: tokens(r.engineLogprobs),
    ...(r.refLogprobs ? { refLogprobs: tokens(r.refLogprobs) } : {}),
    ...(r.oldLogprobs ? { oldLogprobs: tokens(r.oldLogprobs) } : {}),
  };
}
