/**
 * The GRPO objective over one rank's rows, in plain fp64 host math, with every variant
 * TRL / verl users select by name:
 *
 *   coef    = exp(logp − old)                                 importanceSamplingLevel 'token'
 *           = exp(Σ_t (logp_t − old_t) / |y|)  for every t      'sequence' (GSPO)
 *   pg_t    = −min(min(coef, δ)·A, clip(coef, 1 − ε, 1 + ε_high)·A) · w_t
 *             (δ: two-sided clipping, off when null; w_t: rollout-correction weight, 1 when off)
 *   l_t     = pg_t + β·KL_t,   KL_t = k1: logp − ref | k2: ½(logp − ref)² | k3: e^(ref−logp) − (ref − logp) − 1
 *
 * and the objective Σ c_t·l_t with the normalisation c_t of `lossType` (B = rows of the
 * global batch, N = response tokens of the global batch, |y_r| = response tokens of row r):
 *
 *   'grpo'    c_t = 1 / (|y_r|·B)            per-sequence mean, then mean over sequences
 *   'bnpo'    c_t = (rows / B) / n_local     token mean over this rank's rows (TRL: per process), averaged over ranks
 *   'dr_grpo' c_t = 1 / (B·maxCompletionLength)   a constant (Dr. GRPO)
 *   'dapo'    c_t = 1 / N                    token mean over the global batch
 *
 * `weights[t]` is d(objective)/d(logp_t), exact: the trainer backpropagates Σ weights·logp.
 * A min() tie takes the unclipped branch (the one with a gradient), as torch.min does.
 */
import { InvalidArgumentError } from '../runtime/errors.js';

export const LOSS_TYPES = ['grpo', 'bnpo', 'dr_grpo', 'dapo'] as const;
export type LossType = (typeof LOSS_TYPES)[number];
export const KL_ESTIMATORS = ['k1', 'k2', 'k3'] as const;
export type KlEstimator = (typeof KL_ESTIMATORS)[number];
export const IS_LEVELS = ['token', 'sequence'] as const;
export type ImportanceSamplingLevel = (typeof IS_LEVELS)[number];

export interface ObjectiveOptions {
  lossType: LossType;
  /** Lower clip ε (ratio ≥ 1 − ε). */
  epsilon: number;
  /** Upper clip ε_high (ratio ≤ 1 + ε_high); DAPO's clip-higher when larger than epsilon. */
  epsilonHigh: number;
  /** Two-sided clipping: the unclipped ratio is capped at δ (> 1 + ε_high); null: off. */
  delta: number | null;
  importanceSamplingLevel: ImportanceSamplingLevel;
  /** KL coefficient β (0: no KL term). */
  beta: number;
  klEstimator: KlEstimator;
  /** Max completion tokens (the dr_grpo constant). */
  maxCompletionLength: number;
}

/** This rank's rows: row-major [rows·seqLen] arrays; `mask` marks the response tokens the loss takes. */
export interface ObjectiveInput {
  rows: number;
  seqLen: number;
  mask: ArrayLike<boolean | number>;
  logp: ArrayLike<number>;
  oldLogp: ArrayLike<number>;
  /** Needed when beta > 0. */
  refLogp?: ArrayLike<number>;
  /** Rollout-correction weights per token (rollout-correction.ts), treated as constants; default 1. */
  isWeights?: ArrayLike<number>;
  /** One advantage per row. */
  advantages: ArrayLike<number>;
  /** Rows of the global batch (B). */
  globalRows: number;
  /** Response tokens of the global batch (N). */
  globalTokens: number;
}

export interface ObjectiveStats {
  tokens: number;
  /** Tokens whose ratio was clipped below 1 − ε with A < 0 (TRL clip_ratio/low). */
  clippedLow: number;
  /** Tokens whose ratio was clipped above 1 + ε_high with A > 0 (TRL clip_ratio/high). */
  clippedHigh: number;
  /** Tokens whose clipped branch was taken (no surrogate gradient). */
  clipped: number;
  ratio: number;
  kl: number;
}

export interface ObjectiveResult {
  /** This rank's share of the objective Σ c_t·l_t. */
  value: number;
  /** d(objective)/d(logp_t) per token (0 off the mask). */
  weights: Float64Array;
  /** Sums over this rank's response tokens. */
  stats: ObjectiveStats;
}

function kl(est: KlEstimator, logp: number, ref: number): { v: number; d: number } {
  const diff = ref - logp;
  if (est === 'k1') return { v: -diff, d: 1 };
  if (est === 'k2') return { v: 0.5 * diff * diff, d: -diff };
  const e = Math.exp(diff);
  return { v: e - diff - 1, d: 1 - e };
}

/** What the normalisation c_t of a response token depends on: its row's length, this rank's rows and tokens, the global batch. */
export interface NormShape {
  /** Response tokens of the token's row (|y_r|). */
  len: number;
  rows: number;
  localTokens: number;
  globalRows: number;
  globalTokens: number;
}

/** c_t of `lossType` (the table above); the entropy bonus aggregates with the same one. */
export function tokenNorm(o: Pick<ObjectiveOptions, 'lossType' | 'maxCompletionLength'>, n: NormShape): number {
  return o.lossType === 'grpo'
    ? 1 / (n.len * n.globalRows)
    : o.lossType === 'bnpo'
      ? n.rows / n.globalRows / n.localTokens
      : o.lossType === 'dr_grpo'
        ? 1 / (n.globalRows * o.maxCompletionLength)
        : 1 / n.globalTokens;
}

export function checkObjectiveOptions(o: ObjectiveOptions): void {
  const bad = (what: string, v: unknown, want: string) => {
    throw new InvalidArgumentError(`GRPO objective: ${what} must be ${want} but is ${JSON.stringify(v)}.`, { option: what });
  };
  if (!LOSS_TYPES.includes(o.lossType)) bad('lossType', o.lossType, `one of ${LOSS_TYPES.join(', ')}`);
  if (!KL_ESTIMATORS.includes(o.klEstimator)) bad('klEstimator', o.klEstimator, `one of ${KL_ESTIMATORS.join(', ')}`);
  if (!IS_LEVELS.includes(o.importanceSamplingLevel)) bad('importanceSamplingLevel', o.importanceSamplingLevel, `one of ${IS_LEVELS.join(', ')}`);
  if (!(o.epsilon >= 0 && o.epsilon < 1)) bad('epsilon', o.epsilon, 'in [0, 1)');
  if (!(o.epsilonHigh >= 0)) bad('epsilonHigh', o.epsilonHigh, 'non-negative');
  if (o.delta !== null && !(o.delta > 1 + o.epsilonHigh)) bad('delta', o.delta, `null or greater than 1 + epsilonHigh = ${1 + o.epsilonHigh}`);
  if (!(o.beta >= 0)) bad('beta', o.beta, 'non-negative');
  if (!(Number.isInteger(o.maxCompletionLength) && o.maxCompletionLength > 0)) bad('maxCompletionLength', o.maxCompletionLength, 'a positive integer');
}

export function grpoObjective(inp: ObjectiveInput, o: ObjectiveOptions): ObjectiveResult {
  checkObjectiveOptions(o);
  const { rows, seqLen } = inp;
  const n = rows * seqLen;
  for (const [k, a] of [
    ['mask', inp.mask],
    ['logp', inp.logp],
    ['oldLogp', inp.oldLogp],
  ] as const) {
    if (a.length !== n) throw new InvalidArgumentError(`GRPO objective: ${k} has ${a.length} entries; expected rows x seqLen = ${n}.`);
  }
  if (inp.advantages.length !== rows)
    throw new InvalidArgumentError(`GRPO objective: advantages has ${inp.advantages.length} entries; expected one per row (${rows}).`);
  if (o.beta > 0 && inp.refLogp?.length !== n)
    throw new InvalidArgumentError(`GRPO objective: beta = ${o.beta} needs refLogp of ${n} entries. HINT: set beta to 0 or compute reference log-probs.`);
  if (inp.isWeights && inp.isWeights.length !== n)
    throw new InvalidArgumentError(`GRPO objective: isWeights has ${inp.isWeights.length} entries; expected ${n}.`);
  const weights = new Float64Array(n);
  const stats: ObjectiveStats = { tokens: 0, clippedLow: 0, clippedHigh: 0, clipped: 0, ratio: 0, kl: 0 };
  let localTokens = 0;
  for (let i = 0; i < n; i++) if (inp.mask[i]) localTokens++;
  let value = 0;
  const lo = 1 - o.epsilon,
    hi = 1 + o.epsilonHigh;
  for (let r = 0; r < rows; r++) {
    const A = inp.advantages[r]!;
    const base = r * seqLen;
    let len = 0,
      logRatioSum = 0;
    for (let t = 0; t < seqLen; t++) {
      if (!inp.mask[base + t]) continue;
      len++;
      logRatioSum += inp.logp[base + t]! - inp.oldLogp[base + t]!;
    }
    if (len === 0) continue;
    const norm = tokenNorm(o, { len, rows, localTokens, globalRows: inp.globalRows, globalTokens: inp.globalTokens });
    const seqCoef = Math.exp(logRatioSum / len);
    // Sequence level: Σ_s c_s·w_s·(dpg_s/dcoef) flows to every token through dcoef/dlogp_t = coef/|y|.
    let seqGrad = 0;
    for (let t = 0; t < seqLen; t++) {
      const i = base + t;
      if (!inp.mask[i]) continue;
      const coef = o.importanceSamplingLevel === 'token' ? Math.exp(inp.logp[i]! - inp.oldLogp[i]!) : seqCoef;
      const w = inp.isWeights ? inp.isWeights[i]! : 1;
      const capped = o.delta !== null && coef > o.delta;
      const unclippedTerm = (capped ? o.delta! : coef) * A;
      const clippedCoef = Math.min(Math.max(coef, lo), hi);
      const clippedTerm = clippedCoef * A;
      const takeClipped = clippedTerm < unclippedTerm;
      let l = -w * (takeClipped ? clippedTerm : unclippedTerm);
      // d pg / d coef: −w·A on the unclipped branch below δ, else 0.
      const dCoef = takeClipped || capped ? 0 : -w * A;
      if (o.importanceSamplingLevel === 'token') weights[i] = norm * dCoef * coef;
      else seqGrad += norm * dCoef;
      if (o.beta > 0) {
        const k = kl(o.klEstimator, inp.logp[i]!, inp.refLogp![i]!);
        l += o.beta * k.v;
        weights[i] += norm * o.beta * k.d;
        stats.kl += k.v;
      }
      value += norm * l;
      stats.tokens++;
      stats.ratio += coef;
      if (takeClipped) stats.clipped++;
      if (coef < lo && A < 0) stats.clippedLow++;
      if (coef > hi && A > 0) stats.clippedHigh++;
    }
    if (o.importanceSamplingLevel === 'sequence') {
      for (let t = 0; t < seqLen; t++) if (inp.mask[base + t]) weights[base + t] += (seqGrad * seqCoef) / len;
    }
  }
  return { value, weights, stats };
}
