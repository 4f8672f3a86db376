/**
 * The router load-balancing loss in a strategy's training pass, when the model config asks
 * for it (`output_router_logits` true → cfg.moe.routerAuxLossCoef): the objective becomes
 * loss + coef · aux (Transformers adds it whenever labels are given), and `aux_loss` is a stat.
 *
 * - Every forwardBackward is one micro-step with its own aux over the tokens of its WHOLE
 *   global batch: the strategy passes `sum`, its all-reduce over the ranks holding other rows
 *   (fsdp2: dp; megatron: dp, which holds the ep ranks; never tp, whose ranks see the same
 *   tokens), for the k·E counts and the token count. Each rank seeds its share of aux with
 *   coef · scale, so the gradients the strategy sums over dp are those of coef · scale · aux.
 * - `scale` is the loss's LossTerms.auxScale: the micro-step's weight in its optimizer step
 *   (GRPO: its rows over the step's rows), so accumulated micro-steps average their aux as
 *   their loss terms average; 1 when the call is the whole step.
 * - The tokens counted are the padding mask's, or without one each row's positions up to its
 *   last target (rows.ts lossPositions): right pads do not count, and the per-rank trim of
 *   the rows (rows.ts localRows) leaves the value unchanged.
 * - forward() (evaluation) reports the same loss as forwardBackward, aux included, as
 *   Transformers' loss with labels does; it only has no backward.
 */
import { Tensor } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import type { Tape, Var } from '../model/autograd.js';
import type { ModelConfig } from '../model/config.js';
import { routerAuxLoss } from '../model/router-aux-loss.js';
import { lossPositions, weightedSum } from './rows.js';
import type { LocalRows, LossTerms } from './strategy.js';

/** Starts keeping the routing of the forward on `tape` when the config asks for the aux loss. */
export function tapRouters(tape: Tape, cfg: ModelConfig): void {
  if (cfg.moe?.routerAuxLossCoef !== undefined) tape.routerTaps = [];
}

/** The name of the aux loss in StepLoss.stats (summed over ranks and micro-steps like every stat). */
export const AUX_LOSS_STAT = 'aux_loss';

/**
 * `terms` with coef · scale · aux added to its value and `aux_loss` (scale · aux, this rank's
 * share) to its stats, and the backward roots to pass to tape.backward; `terms` unchanged
 * and no root when tapRouters kept nothing.
 */
export async function addRouterAux(
  tape: Tape,
  cfg: ModelConfig,
  rows: LocalRows,
  terms: LossTerms,
  sum?: (local: Float32Array) => Promise<ArrayLike<number>>,
): Promise<{ terms: LossTerms; roots: Array<readonly [Var, Tensor]> }> {
  const taps = tape.routerTaps;
  const coef = cfg.moe?.routerAuxLossCoef;
  if (!taps || coef === undefined) return { terms, roots: [] };
  const scale = terms.auxScale ?? 1;
  if (!(Number.isFinite(scale) && scale >= 0)) {
    throw new InvalidArgumentError(
      `The loss returned auxScale ${scale}; expected a finite number >= 0 (the micro-step's weight in its optimizer step). HINT: leave it out when the call is the whole step.`,
      { argument: 'auxScale' },
    );
  }
  const { stream } = tape;
  const { aux, value: share } = await routerAuxLoss(tape, taps, {
    numExperts: cfg.moe!.numExperts,
    topK: cfg.moe!.topK,
    // Real tokens: the padding mask's, else (right-padded rows) each row's positions up to its last
    // target, which the trim keeps, so the value is the same trimmed or not and pads never count.
    mask: rows.attentionMask ?? lossPositions(rows.targets, rows.rows, rows.seqLen),
    ...(sum ? { sumCounts: sum } : {}),
  });
  const base = terms.value ?? weightedSum((await terms.perToken.value.toArray({ stream })) as Float32Array, terms.weights);
  const seed = tape.own(Tensor.fromArray(stream.device, Float32Array.of(coef * scale), [1], { stream }));
  return {
    terms: { ...terms, value: base + coef * scale * share, stats: { ...terms.stats, [AUX_LOSS_STAT]: scale * share } },
    roots: [[aux, seed]],
  };
}
