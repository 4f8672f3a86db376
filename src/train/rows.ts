/**
 * Data-parallel row shares of a global batch and the default loss (token-mean
 * cross-entropy over the whole global batch).
 */
import { Tensor } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import * as F from '../model/functional.js';
import { IGNORE_INDEX } from '../model/labels.js';
import type { Stream } from '../runtime/device/device-index.js';
import type { LocalRows, LossFn, LossTerms, StepLoss, TrainBatch } from './strategy.js';

/** Checks a global batch's shapes (every strategy calls this first). */
export function checkBatch(b: TrainBatch): void {
  const n = b.batch * b.seqLen;
  if (!Number.isInteger(b.batch) || b.batch < 1 || !Number.isInteger(b.seqLen) || b.seqLen < 1) {
    throw new InvalidArgumentError(`Train batch: expected positive integer batch and seqLen but received batch=${b.batch}, seqLen=${b.seqLen}.`);
  }
  if (!(b.inputIds instanceof Int32Array) || b.inputIds.length !== n || !(b.targets instanceof Int32Array) || b.targets.length !== n) {
    throw new InvalidArgumentError(
      `Train batch: inputIds and targets must be Int32Arrays of batch x seqLen = ${n} tokens (got ${b.inputIds?.length} and ${b.targets?.length}).`,
    );
  }
  const m = b.attentionMask;
  if (m !== undefined && (!(m instanceof Int32Array) || m.length !== n || m.some((x) => x !== 0 && x !== 1))) {
    throw new InvalidArgumentError(
      `Train batch: attentionMask must be an Int32Array of batch x seqLen = ${n} values, 1 for a token and 0 for a pad (got ${m instanceof Int32Array ? `${m.length} values${m.length === n ? ', not all 0 or 1' : ''}` : typeof m}). HINT: pass the rows' 2-D attention_mask flattened, or leave it out for right-padded rows.`,
      { argument: 'attentionMask' },
    );
  }
}

/** Rank `index` of `parts`' rows: the batch split evenly (a batch not divisible by `parts` is an error). */
export function localRows(b: TrainBatch, parts: number, index: number): LocalRows {
  checkBatch(b);
  if (b.batch % parts !== 0) {
    throw new InvalidArgumentError(
      `The global batch has ${b.batch} rows, which does not split evenly over ${parts} data-parallel ranks. HINT: use a batch that is a multiple of ${parts}.`,
      { batch: b.batch, dp: parts },
    );
  }
  const rows = b.batch / parts;
  const row0 = index * rows;
  const s = b.seqLen;
  const out: LocalRows = {
    row0,
    rows,
    seqLen: s,
    inputIds: b.inputIds.subarray(row0 * s, (row0 + rows) * s),
    targets: b.targets.subarray(row0 * s, (row0 + rows) * s),
  };
  if (b.attentionMask) out.attentionMask = b.attentionMask.subarray(row0 * s, (row0 + rows) * s);
  return out;
}

/** Tokens of the global batch that carry a target. */
export function targetTokens(b: TrainBatch): number {
  let n = 0;
  for (const t of b.targets) if (t !== IGNORE_INDEX) n++;
  return n;
}

/** Token-mean cross-entropy over every target token of the global batch. */
export const crossEntropyLoss: LossFn = (tape, logits, rows, global) => {
  const device = logits.value.device;
  const tgt = tape.own(Tensor.fromArray(device, rows.targets, [rows.targets.length], { stream: tape.stream }));
  const perToken = F.crossEntropy(tape, logits, tgt);
  const total = targetTokens(global);
  const weights = new Float32Array(rows.targets.length);
  for (let i = 0; i < weights.length; i++) weights[i] = rows.targets[i] !== IGNORE_INDEX && total ? 1 / total : 0;
  return { perToken, weights };
};

/** Σ weights·perToken on the host (this rank's share of the objective). */
export function weightedSum(perToken: Float32Array, weights: Float32Array): number {
  let s = 0;
  for (let i = 0; i < perToken.length; i++) s += perToken[i]! * weights[i]!;
  return s;
}

/** Tokens with a non-zero weight. */
export function weightedTokens(weights: Float32Array): number {
  let n = 0;
  for (const w of weights) if (w !== 0) n++;
  return n;
}

/**
 * The StepLoss of a loss's terms: this rank's objective share (`terms.value`, else
 * Σ weights·perToken read from the device), weighted tokens and stats, summed over the
 * data-parallel ranks by `sum` (one all-reduce of the packed vector; omit on one rank).
 */
export async function stepLoss(terms: LossTerms, stream: Stream, sum?: (local: Float32Array) => Promise<Float32Array>): Promise<StepLoss> {
  const value = terms.value ?? weightedSum((await terms.perToken.value.toArray({ stream })) as Float32Array, terms.weights);
  const keys = Object.keys(terms.stats ?? {});
  const local = [value, terms.tokens ?? weightedTokens(terms.weights), ...keys.map((k) => terms.stats![k]!)];
  const g: ArrayLike<number> = sum ? await sum(Float32Array.from(local)) : local;
  const stats = keys.length ? Object.fromEntries(keys.map((k, i) => [k, g[2 + i]!])) : undefined;
  return { loss: g[0]!, tokens: Math.round(g[1]!), ...(stats ? { stats } : {}) };
}
