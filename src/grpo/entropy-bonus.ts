/**
 * The entropy bonus of the GRPO loss (verl's actor.entropy_coeff):
 *
 *   loss = policy_loss − entropyCoeff · Σ_t c_t·H_t
 *
 * with H_t the exact entropy of the trainer's softmax over the vocabulary at response
 * token t and c_t the normalisation of the policy loss's `lossType` (objective.ts), so
 * the bonus is aggregated exactly as the policy loss is (token mean over the global batch
 * for dapo, per-sequence mean for grpo, ...). Host fp64 math over this rank's rows.
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import { tokenNorm, type ObjectiveOptions } from './objective.js';

export interface EntropyInput {
  rows: number;
  seqLen: number;
  mask: ArrayLike<boolean | number>;
  /** H_t per token [rows·seqLen] (ignored off the mask). */
  entropy: ArrayLike<number>;
  globalRows: number;
  globalTokens: number;
}

export interface EntropyBonus {
  /** This rank's share of −entropyCoeff·Σ c_t·H_t. */
  value: number;
  /** d(bonus)/dH_t = −entropyCoeff·c_t per token (0 off the mask). */
  weights: Float64Array;
  /** Σ H_t over this rank's response tokens (the exact-entropy metric's numerator). */
  sum: number;
}

/** Throws unless `coeff` is a usable entropyCoeff (finite, >= 0). */
export function checkEntropyCoeff(coeff: number): void {
  if (!(coeff >= 0 && Number.isFinite(coeff)))
    throw new InvalidArgumentError(`GRPO: entropyCoeff must be a finite number >= 0 but is ${coeff}. HINT: use 0 to turn the entropy bonus off.`);
}

export function entropyBonus(inp: EntropyInput, o: Pick<ObjectiveOptions, 'lossType' | 'maxCompletionLength'>, coeff: number): EntropyBonus {
  checkEntropyCoeff(coeff);
  const { rows, seqLen } = inp;
  const n = rows * seqLen;
  if (inp.entropy.length !== n || inp.mask.length !== n)
    throw new InvalidArgumentError(`GRPO entropy bonus: entropy has ${inp.entropy.length} and mask ${inp.mask.length} entries; expected rows x seqLen = ${n}.`);
  let localTokens = 0;
  for (let i = 0; i < n; i++) if (inp.mask[i]) localTokens++;
  const weights = new Float64Array(n);
  let value = 0,
    sum = 0;
  for (let r = 0; r < rows; r++) {
    const base = r * seqLen;
    let len = 0;
    for (let t = 0; t < seqLen; t++) if (inp.mask[base + t]) len++;
    if (len === 0) continue;
    const c = tokenNorm(o, { len, rows, localTokens, globalRows: inp.globalRows, globalTokens: inp.globalTokens });
    for (let t = 0; t < seqLen; t++) {
      const i = base + t;
      if (!inp.mask[i]) continue;
      const h = inp.entropy[i]!;
      weights[i] = -coeff * c;
      value -= coeff * c * h;
      sum += h;
    }
  }
  return { value, weights, sum };
}
