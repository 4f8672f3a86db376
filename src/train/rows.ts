/**
 * Data-parallel row shares of a global batch and the default loss (token-mean
 * cross-entropy over the whole global batch).
 */
import { Tensor } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import * as F from '../model/functional.js';
import { IGNORE_INDEX } from '../model/labels.js';
import type { ModelConfig } from '../model/config.js';
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
  if (b.trimPadding !== undefined && typeof b.trimPadding !== 'boolean') {
    throw new InvalidArgumentError(`Train batch: trimPadding must be a boolean or absent but is ${String(b.trimPadding)}.`, { argument: 'trimPadding' });
  }
  const m = b.attentionMask;
  if (m !== undefined && (!(m instanceof Int32Array) || m.length !== n || m.some((x) => x !== 0 && x !== 1))) {
    throw new InvalidArgumentError(
      `Train batch: attentionMask must be an Int32Array of batch x seqLen = ${n} values, 1 for a token and 0 for a pad (got ${m instanceof Int32Array ? `${m.length} values${m.length === n ? ', not all 0 or 1' : ''}` : typeof m}). HINT: pass the rows' 2-D attention_mask flattened, or leave it out for right-padded rows.`,
      { argument: 'attentionMask' },
    );
  }
}

/**
 * The width a block of rows needs: 1 + the last position with a target over the rows (at
 * least 1). Under causal attention (and Qwen3.5's causal linear attention) a position after a
 * row's last target feeds no loss term and no gradient, so those positions can be dropped
 * exactly; a row whose targets are all IGNORE_INDEX needs none. With a padding mask, the last
 * token it marks is kept too: the router aux loss counts the mask's tokens (router-aux-step.ts).
 */
export function trimmedWidth(targets: Int32Array, rows: number, seqLen: number, mask?: Int32Array): number {
  let width = 1;
  for (let r = 0; r < rows; r++) {
    const row = r * seqLen;
    for (let t = seqLen - 1; t >= width; t--) {
      if (targets[row + t] !== IGNORE_INDEX || (mask && mask[row + t])) {
        width = t + 1;
        break;
      }
    }
  }
  return width;
}

/** Per row of a row-major [rows·seqLen] targets array: 1 + its last target position (0 when it has none). */
export function targetWidths(targets: Int32Array, rows: number, seqLen: number): Int32Array {
  const out = new Int32Array(rows);
  for (let r = 0; r < rows; r++) {
    let t = seqLen - 1;
    while (t >= 0 && targets[r * seqLen + t] === IGNORE_INDEX) t--;
    out[r] = t + 1;
  }
  return out;
}

/**
 * The token slots of right-padded rows without a padding mask that the router aux loss counts:
 * positions up to each row's last target (1), the rest (trailing pads, and tokens after the last
 * target that no loss term reads) 0. It does not depend on the trim: trimmedWidth keeps them all.
 */
export function lossPositions(targets: Int32Array, rows: number, seqLen: number): Int32Array {
  const out = new Int32Array(rows * seqLen);
  targetWidths(targets, rows, seqLen).forEach((w, r) => out.fill(1, r * seqLen, r * seqLen + w));
  return out;
}

/** Rows of a row-major [rows·from] array at width `to` <= from (a copy; the array itself when the widths agree). */
export function narrowRows<T extends Int32Array | Float32Array>(a: T, rows: number, from: number, to: number): T {
  if (to === from) return a;
  const out = new (a.constructor as new (n: number) => T)(rows * to);
  for (let r = 0; r < rows; r++) out.set(a.subarray(r * from, r * from + to), r * to);
  return out;
}

/** Rows of a row-major [rows·from] array widened to `to` >= from, zero-filled (a copy; the array itself when the widths agree). */
export function widenRows(a: Float32Array, rows: number, from: number, to: number): Float32Array {
  if (to === from) return a;
  const out = new Float32Array(rows * to);
  for (let r = 0; r < rows; r++) out.set(a.subarray(r * from, (r + 1) * from), r * to);
  return out;
}

/**
 * Whether computing `cfg`'s rows at a narrower width leaves the kept positions' values as they
 * were. Not under dynamic rope: its table follows the sequence length (rope-scaling.ts), so a
 * trimmed batch would rotate with another table than the full one (and than the engine's prefill).
 */
export function trimsExactly(cfg: Pick<ModelConfig, 'rope'>): boolean {
  return cfg.rope.type !== 'dynamic';
}

/**
 * Rank `index` of `parts`' rows: the batch split evenly (a batch not divisible by `parts` is an
 * error), trimmed to the width its own rows need (trimmedWidth; `stride` keeps the global seqLen
 * for reading global [batch·seqLen] arrays, see localTokens) unless `trim` is false (a model the
 * trim is not exact for, see trimsExactly) or the batch says trimPadding: false.
 */
export function localRows(b: TrainBatch, parts: number, index: number, trim = true): LocalRows {
  checkBatch(b);
  if (b.batch % parts !== 0) {
    throw new InvalidArgumentError(
      `The global batch has ${b.batch} rows, which does not split evenly over ${parts} data-parallel ranks. HINT: use a batch that is a multiple of ${parts}.`,
      { batch: b.batch, dp: parts },
    );
  }
  const rows = b.batch / parts;
  const row0 = index * rows;
  const S = b.seqLen;
  const mine = <T extends Int32Array>(a: T) => a.subarray(row0 * S, (row0 + rows) * S) as T;
  const targets = mine(b.targets);
  const s = b.trimPadding === false || !trim ? S : trimmedWidth(targets, rows, S, b.attentionMask && mine(b.attentionMask));
  const out: LocalRows = {
    row0,
    rows,
    seqLen: s,
    stride: S,
    inputIds: narrowRows(mine(b.inputIds), rows, S, s),
    targets: narrowRows(targets, rows, S, s),
  };
  if (b.attentionMask) out.attentionMask = narrowRows(mine(b.attentionMask), rows, S, s);
  return out;
}

/** This rank's rows of a global per-token [batch·stride] array, at the rank's trimmed width [rows·seqLen]. */
export function localTokens(rows: LocalRows, global: Float32Array): Float32Array {
  const S = rows.stride ?? rows.seqLen;
  return narrowRows(global.subarray(rows.row0 * S, (rows.row0 + rows.rows) * S), rows.rows, S, rows.seqLen);
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
