/**
 * The per-token GRPO objective and its derivative with respect to the token's
 * log-probability under the current policy (pure host math, fp64):
 *
 *   ratio  = exp(logp − oldLogp)
 *   surr   = −min(ratio·A, clip(ratio, 1−εlow, 1+εhigh)·A)
 *   kl     = exp(ref − logp) − (ref − logp) − 1          (k3 estimator, ≥ 0)
 *   obj    = surr + β·kl
 *   dobj/dlogp = −A·ratio when the unclipped term is the one taken, else 0;
 *                plus β·(1 − exp(ref − logp)).
 *
 * The trainer backpropagates Σ w_t·logp_t with w_t = dobj_t/dlogp_t / N, which has
 * exactly the gradient of Σ obj_t / N (N = response tokens of the global batch).
 */
export interface TokenTermOptions {
  clipLow: number;
  clipHigh: number;
  /** KL coefficient β (0: no KL term and no reference log-probs needed). */
  beta: number;
}

export interface TokenTerms {
  obj: number;
  dObjDLogp: number;
  /** The clipped branch was taken (no gradient through the surrogate). */
  clipped: boolean;
  kl: number;
  ratio: number;
}

export function tokenTerms(logp: number, oldLogp: number, refLogp: number | undefined, adv: number, o: TokenTermOptions): TokenTerms {
  const ratio = Math.exp(logp - oldLogp);
  const clippedRatio = Math.min(Math.max(ratio, 1 - o.clipLow), 1 + o.clipHigh);
  const unclippedTerm = ratio * adv;
  const clippedTerm = clippedRatio * adv;
  // min(unclipped, clipped); ties take the unclipped branch (it has the gradient, as torch.min does for equal inputs on the first argument).
  const clipped = clippedTerm < unclippedTerm;
  let obj = -(clipped ? clippedTerm : unclippedTerm);
  let d = clipped ? 0 : -adv * ratio;
  let kl = 0;
  if (o.beta !== 0 && refLogp !== undefined) {
    const diff = refLogp - logp;
    kl = Math.exp(diff) - diff - 1;
    obj += o.beta * kl;
    d += o.beta * (1 - Math.exp(diff));
  }
  return { obj, dObjDLogp: d, clipped, kl, ratio };
}
