/**
 * The rope table of a model: inv_freq over the rotary dim and the attention scaling that
 * multiplies cos and sin, for every rope type config.ts parses (Transformers 5 definitions):
 * - default: inv_freq[i] = theta^(-2i/dim), scale 1;
 * - linear: default / factor;
 * - dynamic (NTK): the default table of base theta · (factor·L/orig − (factor − 1))^(dim/(dim−2)),
 *   L = max(seqLen, orig); up to orig it is the default table;
 * - yarn: per pair a blend of the interpolated (1/(factor·theta^(2i/dim))) and extrapolated
 *   (theta^(-2i/dim)) frequency by a linear ramp between the correction dims of beta_fast
 *   (default 32) and beta_slow (default 1), floored / ceiled unless truncate is false; scale =
 *   attention_factor, else 0.1·ln(factor) + 1 (1 for factor <= 1); `factor` as written (Transformers 4
 *   replaced it by max_position_embeddings / original_max_position_embeddings when both were given);
 * - llama3: wavelengths above orig/low_freq_factor divided by factor, below orig/high_freq_factor
 *   kept, smoothly blended between.
 * `orig` is original_max_position_embeddings, else max_position_embeddings (HF fills one from
 * the other). `dim` is the rotary dim: head_dim, or head_dim · partial_rotary_factor for
 * Qwen3.5, so the table covers only the rotated channels.
 *
 * Dynamic rope and sequences beyond orig: the trainer computes the table per forward from the
 * batch it runs (seqLen = max position + 1 of its rows; on a data-parallel rank, of that rank's
 * rows, as HF does per forward call), statelessly; the rollout engine computes it per forward
 * step, so keys already in its KV cache keep the table they were written with, as HF generate
 * does. The two therefore differ for sequences longer than orig (the trainer rotates every key
 * with the final length's table). Up to orig both use the default table.
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import type { RopeConfig } from './config.js';
import type { RopeTable } from './kernels/rope.js';

/** What the table depends on: the parsed rope and, when it has no original max, the model's. */
export interface RopeSource {
  rope: RopeConfig;
  maxPositionEmbeddings?: number;
}

/** original_max_position_embeddings, else max_position_embeddings; undefined when neither is known. */
export function originalMaxPositions(src: RopeSource): number | undefined {
  return src.rope.originalMaxPositionEmbeddings ?? src.maxPositionEmbeddings;
}

function needOrig(src: RopeSource): number {
  const orig = originalMaxPositions(src);
  if (orig === undefined) {
    throw new InvalidArgumentError(
      `rope type "${src.rope.type}" needs original_max_position_embeddings (or the model's max_position_embeddings) but the config has neither. HINT: add "original_max_position_embeddings" to rope_parameters.`,
      { ropeType: src.rope.type },
    );
  }
  return orig;
}

/** theta^(-2i/dim), i < dim/2: the unscaled table (the kernel computed exactly this before tables existed). */
function defaultInvFreq(theta: number, dim: number): Float64Array {
  return Float64Array.from({ length: dim / 2 }, (_, i) => Math.pow(theta, (-2 * i) / dim));
}

function yarn(src: RopeSource, dim: number): RopeTable {
  const { rope } = src;
  const theta = rope.theta,
    factor = rope.factor!,
    orig = needOrig(src);
  const scale = rope.attentionFactor ?? (factor <= 1 ? 1 : 0.1 * Math.log(factor) + 1);
  const betaFast = rope.betaFast ?? 32,
    betaSlow = rope.betaSlow ?? 1;
  // The pair index at which a wavelength completes `rotations` turns over the original context.
  const correctionDim = (rotations: number) => (dim * Math.log(orig / (rotations * 2 * Math.PI))) / (2 * Math.log(theta));
  let low = correctionDim(betaFast),
    high = correctionDim(betaSlow);
  if (rope.truncate !== false) {
    low = Math.floor(low);
    high = Math.ceil(high);
  }
  low = Math.max(low, 0);
  high = Math.min(high, dim - 1);
  if (low === high) high += 0.001; // HF: keeps the ramp finite
  const invFreq = new Float64Array(dim / 2);
  for (let i = 0; i < dim / 2; i++) {
    const ramp = Math.min(Math.max((i - low) / (high - low), 0), 1);
    const extrapolation = 1 - ramp; // weight of the unscaled frequency
    const posFreq = Math.pow(theta, (2 * i) / dim);
    invFreq[i] = (1 / (factor * posFreq)) * (1 - extrapolation) + (1 / posFreq) * extrapolation;
  }
  return { invFreq, scale };
}

function llama3(src: RopeSource, dim: number): RopeTable {
  const { rope } = src;
  const factor = rope.factor!,
    lowFreq = rope.lowFreqFactor!,
    highFreq = rope.highFreqFactor!,
    orig = needOrig(src);
  const lowWavelen = orig / lowFreq,
    highWavelen = orig / highFreq;
  const invFreq = defaultInvFreq(rope.theta, dim).map((f) => {
    const wavelen = (2 * Math.PI) / f;
    if (wavelen < highWavelen) return f;
    if (wavelen > lowWavelen) return f / factor;
    const smooth = (orig / wavelen - lowFreq) / (highFreq - lowFreq);
    return (1 - smooth) * (f / factor) + smooth * f;
  });
  return { invFreq, scale: 1 };
}

/** The table without the cache (see the file header for each type). */
export function computeRopeTable(src: RopeSource, dim: number, seqLen = 0): RopeTable {
  const { rope } = src;
  switch (rope.type) {
    case 'default':
      return { invFreq: defaultInvFreq(rope.theta, dim), scale: 1 };
    case 'linear':
      return { invFreq: defaultInvFreq(rope.theta, dim).map((f) => f / rope.factor!), scale: 1 };
    case 'dynamic': {
      const orig = needOrig(src);
      if (seqLen <= orig) return { invFreq: defaultInvFreq(rope.theta, dim), scale: 1 };
      const factor = rope.factor!;
      const base = rope.theta * Math.pow((factor * seqLen) / orig - (factor - 1), dim / (dim - 2));
      return { invFreq: defaultInvFreq(base, dim), scale: 1 };
    }
    case 'yarn':
      return yarn(src, dim);
    case 'llama3':
      return llama3(src, dim);
  }
}

// Tables per rope config (by identity), then per dim and length bucket: every length up to the
// original max shares one entry; dynamic beyond it depends on the exact length. Bounded so a
// long generation's growing lengths cannot grow it without limit.
const CACHE = new WeakMap<RopeConfig, Map<string, RopeTable>>();
const MAX_ENTRIES = 64;

/**
 * The rope table of rotary dim `dim` (even, >= 2) at sequence length `seqLen` (max position + 1;
 * only dynamic rope reads it), cached. The returned arrays are shared: do not modify them.
 */
export function ropeTable(src: RopeSource, dim: number, seqLen = 0): RopeTable {
  if (!Number.isSafeInteger(dim) || dim < 2 || dim % 2 !== 0) {
    throw new InvalidArgumentError(
      `ropeTable(): the rotary dim must be an even integer >= 2 but is ${dim}. HINT: pass head_dim, or head_dim · partial_rotary_factor.`,
      {
        argument: 'dim',
      },
    );
  }
  if (!Number.isSafeInteger(seqLen) || seqLen < 0) {
    throw new InvalidArgumentError(`ropeTable(): seqLen must be a non-negative integer (max position + 1) but is ${seqLen}.`, { argument: 'seqLen' });
  }
  const dynamicLen = src.rope.type === 'dynamic' && seqLen > needOrig(src) ? seqLen : 0;
  const key = `${dim}:${dynamicLen}:${src.maxPositionEmbeddings ?? ''}`;
  let byKey = CACHE.get(src.rope);
  if (!byKey) CACHE.set(src.rope, (byKey = new Map()));
  let table = byKey.get(key);
  if (!table) {
    table = computeRopeTable(src, dim, seqLen);
    if (byKey.size >= MAX_ENTRIES) byKey.delete(byKey.keys().next().value!);
    byKey.set(key, table);
  }
  return table;
}
