/**
 * Learning-rate schedules with warm-up, as transformers' get_scheduler names them
 * (TRL's `lr_scheduler_type`, `warmup_steps` / `warmup_ratio`):
 *
 *   warm-up (step < warmup)  lr · step / warmup
 *   'constant'   lr after warm-up
 *   'linear'     lr · (total − step) / (total − warmup), down to 0 at `totalSteps`
 *   'cosine'     minLr + (lr − minLr) · ½(1 + cos(π · progress)), progress = (step − warmup) / (total − warmup)
 *
 * `step` is the optimizer step about to be taken, counted from 0, as transformers counts it
 * (so with a warm-up the first step runs at lr 0).
 */
import { InvalidArgumentError } from '../runtime/errors.js';

export const LR_SCHEDULES = ['constant', 'linear', 'cosine'] as const;
export type LrScheduleKind = (typeof LR_SCHEDULES)[number];

export interface LrSchedule {
  kind: LrScheduleKind;
  /** Peak learning rate. */
  lr: number;
  /** Warm-up optimizer steps (linear from 0 to lr). */
  warmupSteps: number;
  /** Optimizer steps of the whole run (needed by 'linear' and 'cosine'). */
  totalSteps: number;
  /** Floor of the cosine decay (default 0). */
  minLr?: number;
}

export function checkLrSchedule(s: LrSchedule): void {
  const bad = (msg: string) => {
    throw new InvalidArgumentError(`lr schedule: ${msg}`, { schedule: s.kind });
  };
  if (!LR_SCHEDULES.includes(s.kind)) bad(`kind must be one of ${LR_SCHEDULES.join(', ')} but is ${JSON.stringify(s.kind)}.`);
  if (!(s.lr > 0)) bad(`lr must be positive but is ${s.lr}.`);
  if (!(Number.isInteger(s.warmupSteps) && s.warmupSteps >= 0)) bad(`warmupSteps must be a non-negative integer but is ${s.warmupSteps}.`);
  if (!(Number.isInteger(s.totalSteps) && s.totalSteps >= 1)) bad(`totalSteps must be a positive integer but is ${s.totalSteps}.`);
  if (s.kind !== 'constant' && s.warmupSteps >= s.totalSteps)
    bad(`warmupSteps (${s.warmupSteps}) must be below totalSteps (${s.totalSteps}) for a '${s.kind}' decay.`);
  if (s.minLr !== undefined && !(s.minLr >= 0 && s.minLr <= s.lr)) bad(`minLr must be in [0, lr] but is ${s.minLr}.`);
}

/** The learning rate of optimizer step `step` (0-based). */
export function lrAt(s: LrSchedule, step: number): number {
  if (step < s.warmupSteps) return (s.lr * step) / Math.max(1, s.warmupSteps);
  if (s.kind === 'constant') return s.lr;
  const span = s.totalSteps - s.warmupSteps;
  const progress = Math.min(1, (step - s.warmupSteps) / span);
  if (s.kind === 'linear') return s.lr * (1 - progress);
  const floor = s.minLr ?? 0;
  return floor + (s.lr - floor) * 0.5 * (1 + Math.cos(Math.PI * progress));
}
