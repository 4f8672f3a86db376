/**
 * Turning sampled completions into a training batch: row i is prompt ‖ completion,
 * right-padded with PAD to the longest row; targets are the next tokens over the
 * completion only (IGNORE_INDEX elsewhere), and a per-token array from the engine
 * (log-probs of the completion tokens) is placed at the positions whose target is
 * that token.
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import { IGNORE_INDEX, PAD } from '../data/synthetic-task.js';
import type { TrainBatch } from '../train/strategy.js';

export interface Sequences {
  prompts: readonly (readonly number[])[];
  completions: readonly (readonly number[])[];
}

export function buildTrainBatch(s: Sequences): TrainBatch {
  const n = s.prompts.length;
  if (n === 0 || s.completions.length !== n) {
    throw new InvalidArgumentError(`buildTrainBatch(): ${n} prompts and ${s.completions.length} completions; expected the same positive number.`);
  }
  const seqLen = Math.max(...s.prompts.map((p, i) => p.length + s.completions[i]!.length));
  const inputIds = new Int32Array(n * seqLen).fill(PAD);
  const targets = new Int32Array(n * seqLen).fill(IGNORE_INDEX);
  for (let i = 0; i < n; i++) {
    const p = s.prompts[i]!,
      c = s.completions[i]!;
    if (p.length === 0) throw new InvalidArgumentError(`buildTrainBatch(): prompt ${i} is empty.`);
    const row = i * seqLen;
    inputIds.set(p, row);
    inputIds.set(c, row + p.length);
    for (let j = 0; j < c.length; j++) targets[row + p.length - 1 + j] = c[j]!;
  }
  return { inputIds, targets, batch: n, seqLen };
}

/** Places per-completion-token values (e.g. the engine's log-probs) at their target positions; 0 elsewhere. */
export function alignToTargets(batch: TrainBatch, prompts: readonly (readonly number[])[], values: readonly (readonly number[])[]): Float32Array {
  const out = new Float32Array(batch.batch * batch.seqLen);
  for (let i = 0; i < batch.batch; i++) {
    const base = i * batch.seqLen + prompts[i]!.length - 1;
    values[i]!.forEach((v, j) => (out[base + j] = v));
  }
  return out;
}

/** Assembles per-rank pieces {row0, rows, values} (duplicates from tensor-parallel peers allowed) into one [B·S] array. */
export function assembleRows(batch: TrainBatch, pieces: readonly { row0: number; rows: number; logprobs: Float32Array }[]): Float32Array {
  const out = new Float32Array(batch.batch * batch.seqLen);
  const seen = new Uint8Array(batch.batch);
  for (const p of pieces) {
    out.set(p.logprobs, p.row0 * batch.seqLen);
    seen.fill(1, p.row0, p.row0 + p.rows);
  }
  const missing = seen.indexOf(0);
  if (missing >= 0) throw new InvalidArgumentError(`assembleRows(): no rank returned row ${missing} of ${batch.batch}.`);
  return out;
}
