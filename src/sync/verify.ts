/**
 * Verification of a weight sync: (1) per-tensor checksums of the engine — every runtime
 * parameter is 'processed' and has a checksum (no parameter was left unwritten,
 * half-processed or dropped); (2) log-prob parity on a probe batch — the trainer's
 * eval-mode forward (rowLogprobs, the pass TrainerActor.computeLogprobs runs) and the
 * engine's computeLogprobs agree within `tolerance` at every position. A layout bug
 * (e.g. one transposed expert weight) changes the engine's logits, so (2) catches what a
 * byte count cannot.
 */
import { InvalidArgumentError, WeightSyncError } from '../runtime/errors.js';
import { IGNORE_INDEX } from '../model/kernels/index.js';
import { rowLogprobs } from '../grpo/logprob-op.js';
import type { RolloutEngine } from '../rollout/engine.js';
import type { TrainBatch, TrainStrategy } from '../train/strategy.js';

export interface VerifyOptions {
  probe: { ids: number[][]; temperature: number };
  tolerance: number;
}

export function checkVerify(v: VerifyOptions | undefined): void {
  if (v === undefined) return;
  const ok = v && typeof v === 'object' && v.probe && Array.isArray(v.probe.ids) && v.probe.ids.length > 0 && v.probe.ids.every((r) => Array.isArray(r) && r.length >= 2)
    && typeof v.probe.temperature === 'number' && v.probe.temperature > 0 && typeof v.tolerance === 'number' && v.tolerance > 0;
  if (!ok) {
    throw new InvalidArgumentError('Weight sync verify expects { probe: { ids: number[][] (rows of at least 2 tokens), temperature > 0 }, tolerance > 0 }.', { argument: 'verify' });
  }
}

/** The probe as a TrainBatch: rows right-padded with 0 to the longest, targets IGNORE_INDEX past each row's end. */
export function probeBatch(ids: number[][]): TrainBatch {
  const S = Math.max(...ids.map((r) => r.length));
  const inputIds = new Int32Array(ids.length * S), targets = new Int32Array(ids.length * S).fill(IGNORE_INDEX);
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

/** Every runtime parameter processed with a checksum; otherwise a WeightSyncError naming the first bad one. */
export async function checkEngineChecksums(engine: RolloutEngine): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const [name, c] of await engine.checksums()) {
    if (c.layout !== 'processed' || c.checksum === null) {
      throw new WeightSyncError(`Weight sync verification: runtime parameter ${name} is '${c.layout}'${c.checksum === null ? ' without bytes' : ''} after the sync; every parameter must be 'processed'. HINT: the sync did not write it (a missing source tensor) or left a reload unprocessed.`, { parameter: name, layout: c.layout });
    }
    out.set(name, c.checksum);
  }
  return out;
}

export function logprobError(w: Worst, tolerance: number, ids: number[][]): WeightSyncError {
  return new WeightSyncError(
    `Weight sync verification failed: trainer and engine log-probs of the probe differ by ${w.diff.toExponential(3)} (tolerance ${tolerance}) at row ${w.row}, position ${w.pos} (token ${ids[w.row]?.[w.pos + 1]}). HINT: a runtime weight is in the wrong layout or was not written (e.g. a transposed expert weight); compare engine.checksums() with a full reload from strategy.gatherState('params').`,
    { maxLogprobDiff: w.diff, row: w.row, position: w.pos, tolerance },
  );
}
