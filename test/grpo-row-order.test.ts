/**
 * Length-sorted rows for the policy update (src/grpo/row-order.ts, update.ts sortedRollout):
 * each mini-batch's rows are sorted by the width they need, every per-row array moves with its
 * row, no row changes mini-batch, and the trainer ranks receive the sorted rows.
 */
import { describe, expect, it } from 'vitest';
import { ActorMesh, type ActorRef } from '../src/internal.js';
import type { TrainerActor, TrainStepResult } from '../src/actors/trainer.js';
import type { TrainBatch } from '../src/train/strategy.js';
import { lengthOrder, paddedFraction, rowWidths, tokenSlots } from '../src/grpo/row-order.js';
import { policyUpdate, sortedRollout, type RolloutBatch } from '../src/grpo/update.js';

const S = 6;
/** Row r has targets up to position LAST[r] (-1: none); every per-token value is 100·r + t. */
const LAST = [4, 1, -1, 3, 0, 5, 2, 2];
function rollout(): RolloutBatch {
  const B = LAST.length;
  const targets = new Int32Array(B * S).fill(-100);
  LAST.forEach((l, r) => targets.fill(9, r * S, r * S + l + 1));
  const inputIds = Int32Array.from({ length: B * S }, (_, i) => 100 * Math.floor(i / S) + (i % S));
  const tokens = (k: number) => Float32Array.from({ length: B * S }, (_, i) => k + 100 * Math.floor(i / S) + (i % S));
  const batch: TrainBatch = { inputIds, targets, batch: B, seqLen: S };
  return { batch, advantages: Float32Array.from(LAST, (_, r) => r), engineLogprobs: tokens(0.25), oldLogprobs: tokens(0.5), refLogprobs: tokens(0.75) };
}

describe('row order', () => {
  it('widths, and each range sorted by width (stable), rows never leaving their range', () => {
    const r = rollout();
    expect(Array.from(rowWidths(r.batch))).toEqual([5, 2, 0, 4, 1, 6, 3, 3]);
    expect(Array.from(lengthOrder(r.batch, [[0, 8]]))).toEqual([2, 4, 1, 6, 7, 3, 0, 5]);
    expect(
      Array.from(
        lengthOrder(r.batch, [
          [0, 4],
          [4, 8],
        ]),
      ),
    ).toEqual([2, 1, 3, 0, 4, 6, 7, 5]);
  });

  it('sortedRollout moves every per-row and per-token array with its row', () => {
    const r = rollout();
    const s = sortedRollout(r, [[0, 8]]);
    const order = [2, 4, 1, 6, 7, 3, 0, 5];
    expect(Array.from(s.advantages)).toEqual(order);
    order.forEach((src, i) => {
      for (const [k, base] of [
        ['engineLogprobs', 0.25],
        ['oldLogprobs', 0.5],
        ['refLogprobs', 0.75],
      ] as const) {
        expect(Array.from(s[k]!.subarray(i * S, (i + 1) * S)), `${k} row ${i}`).toEqual(Array.from({ length: S }, (_, t) => base + 100 * src + t));
      }
      expect(Array.from(s.batch.inputIds.subarray(i * S, (i + 1) * S))).toEqual(Array.from(r.batch.inputIds.subarray(src * S, (src + 1) * S)));
      expect(Array.from(s.batch.targets.subarray(i * S, (i + 1) * S))).toEqual(Array.from(r.batch.targets.subarray(src * S, (src + 1) * S)));
    });
    expect(Array.from(r.advantages)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]); // the caller's arrays are untouched
  });

  it('paddedFraction: the token slots past the rows’ widths, untrimmed and after a per-rank trim', () => {
    const r = rollout();
    const real = 5 + 2 + 0 + 4 + 1 + 6 + 3 + 3;
    const slots = tokenSlots(r.batch, 4);
    expect(slots).toEqual({ needed: real, trimmed: 4 * 5 + 4 * 6, full: 8 * S });
    const f = paddedFraction(slots);
    expect(f.untrimmed).toBeCloseTo(1 - real / (8 * S), 12);
    expect(f.trimmed).toBeCloseTo(1 - real / (4 * 5 + 4 * 6), 12);
  });
});

describe('policyUpdate sorts each mini-batch before the trainer ranks split it', () => {
  it('every micro-batch the ranks receive is in width order, with its own advantages and log-probs', async () => {
    const calls: Array<{ batch: TrainBatch; data: { advantages: Float32Array; oldLogprobs?: Float32Array } }[]> = [];
    const result = (): TrainStepResult => ({ loss: 1, gradNorm: 0, lr: 0.5, stats: {} }) as unknown as TrainStepResult;
    const refs = [0, 1].map((rank) => ({
      rank,
      invoke: async (_method: string, args: unknown[]) => {
        if (rank === 0) calls.push(args[1] as (typeof calls)[number]);
        return result();
      },
    }));
    const trainers = new ActorMesh<TrainerActor>('trainer', refs as unknown as ActorRef<TrainerActor>[], () => undefined);
    const res = await policyUpdate(trainers, rollout(), {
      shape: { numIterations: 1, stepsPerGeneration: 2, gradientAccumulationSteps: 1, dp: 2 },
      loss: {} as never,
      schedule: { kind: 'constant', lr: 0.5, warmupSteps: 0, totalSteps: 10 },
      firstStep: 0,
      temperature: 1,
    });
    expect(calls.length).toBe(2);
    // 24 needed slots of 48; sorted, the ranks' blocks trim to widths 2, 5 | 3, 6: 32 slots.
    expect(res.paddedFraction).toEqual({ untrimmed: 0.5, trimmed: 0.25 });
    const got = calls.map((micro) => Array.from(micro[0]!.data.advantages));
    expect(got).toEqual([
      [2, 1, 3, 0],
      [4, 6, 7, 5],
    ]);
    for (const micro of calls) {
      const { batch, data } = micro[0]!;
      expect(Array.from(rowWidths(batch))).toEqual(Array.from(data.advantages, (r) => LAST[r]! + 1));
      data.advantages.forEach((r, i) => expect(data.oldLogprobs![i * S + 1]).toBe(0.5 + 100 * r + 1));
    }
  });
});
