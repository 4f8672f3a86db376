/**
 * Verification of a weight sync: (1) exact fingerprints (fingerprint-check.ts) — after a
 * full sync every engine rank's copy of every tensor region equals the trainer's, bit
 * for bit, whatever the layouts on both sides (this covers every expert, routed to or
 * not); (2) optionally, log-prob parity on a probe batch — the trainer's eval-mode forward
 * (rowLogprobs, the pass TrainerActor.computeLogprobs runs) and the engine's
 * computeLogprobs agree within `tolerance` at every position (an end-to-end check of the
 * forward on the synced weights, and the check of a LoRA adapter sync, whose engine
 * weights base + scaling·B·A are computed on the engine and so have no trainer-side
 * fingerprint).
 */
import { InvalidArgumentError, WeightSyncError } from '../runtime/errors.js';
import { IGNORE_INDEX } from '../model/kernels/index.js';
import type { TrainBatch, TrainStrategy } from '../train/strategy.js';

/** `true`: fingerprints only; with `probe`, the log-prob parity too (within `tolerance`, default 1e-3). */
export type VerifyOptions =
  | true
  | {
      probe?: { ids: number[][]; temperature: number };
      tolerance?: number;
    };

export interface ResolvedVerify {
  probe: { ids: number[][]; temperature: number } | null;
  tolerance: number;
}

export function checkVerify(v: VerifyOptions | undefined): ResolvedVerify | null {
  if (v === undefined) return null;
  if (v === true) return { probe: null, tolerance: 1e-3 };
  const probeOk = (p: unknown) => {
    const q = p as { ids?: unknown; temperature?: unknown };
    return (
      !!q &&
      typeof q === 'object' &&
      Array.isArray(q.ids) &&
      q.ids.length > 0 &&
      q.ids.every((r) => Array.isArray(r) && r.length >= 2) &&
      typeof q.temperature === 'number' &&
      q.temperature > 0
    );
  };
  const ok =
    !!v &&
    typeof v === 'object' &&
    (v.probe === undefined || probeOk(v.probe)) &&
    (v.tolerance === undefined || (typeof v.tolerance === 'number' && v.tolerance > 0));
  if (!ok) {
    throw new InvalidArgumentError(
      'Weight sync verify expects true or { probe?: { ids: number[][] (rows of at least 2 tokens), temperature > 0 }, tolerance?: number > 0 }.',
      { argument: 'verify' },
    );
  }
  return { probe: v.probe ?? null, tolerance: v.tolerance ?? 1e-3 };
}

/** The probe as a TrainBatch: rows right-padded with 0 to the longest, targets IGNORE_INDEX past each row's end. */
export function probeBatch(ids: number[][]): TrainBatch {
  const S = Math.max(...ids.map((r) => r.length));
  const inputIds = new Int32Array(ids.length * S),
    targets = new Int32Array(ids.length * S).fill(IGNORE_INDEX);
  ids.forEach((r, b) => {
    inputIds.set(r, b * S);
    for (let t = 0; t + 1 < r.length; t++) targets[b * S + t] = r[t + 1]!;
  });
  return { inputIds, targets, batch: ids.length, seqLen: S };
}

/**
 * Collective over the strategy: the trainer's log-probs of the probe, [B·S] (position t of
 * row b = log p(ids[b][t+1])), with `rows` marking the rows this rank computed (its
 * data-parallel share).
 */
export async function trainerLogprobs(s: TrainStrategy, batch: TrainBatch, temperature: number): Promise<{ values: Float32Array; rows: Uint8Array }> {
  // Loaded here, on trainer ranks only: an engine rank's sync never loads src/train (only its types).
  const { rowLogprobs } = await import('../train/logprobs.js');
  const mine = await rowLogprobs(s, batch, temperature);
  const values = new Float32Array(batch.batch * batch.seqLen);
  values.set(mine.logprobs, mine.row0 * batch.seqLen);
  const rows = new Uint8Array(batch.batch).fill(1, mine.row0, mine.row0 + mine.rows);
  return { values, rows };
}

export interface Worst {
  diff: number;
  row: number;
  pos: number;
}

/** Largest |trainer − engine| over the rows marked in `rows`. */
export function worstDiff(ids: number[][], S: number, trainer: Float32Array, rows: ArrayLike<number>, engine: number[][]): Worst {
  const w: Worst = { diff: 0, row: -1, pos: -1 };
  ids.forEach((r, b) => {
    if (!rows[b]) return;
    for (let t = 0; t + 1 < r.length; t++) {
      const d = Math.abs(trainer[b * S + t]! - engine[b]![t]!);
      if (!(d <= w.diff)) Object.assign(w, { diff: Number.isNaN(d) ? Infinity : d, row: b, pos: t });
    }
  });
  return w;
}

export function logprobError(w: Worst, tolerance: number, ids: number[][]): WeightSyncError {
  return new WeightSyncError(
    `Weight sync verification failed: trainer and engine log-probs of the probe differ by ${w.diff.toExponential(3)} (tolerance ${tolerance}) at row ${w.row}, position ${w.pos} (token ${ids[w.row]?.[w.pos + 1]}). HINT: a runtime weight is in the wrong layout or was not written (e.g. a transposed expert weight); verify with fingerprints (verify: true) to name the tensor and engine rank.`,
    { maxLogprobDiff: w.diff, row: w.row, position: w.pos, tolerance },
  );
}
