/**
 * GRPO's clipped-surrogate loss as a trainer LossFn (src/train/strategy.ts).
 *
 * Token-level normalisation (DAPO / TRL `loss_type="dapo"`): the objective is the sum of
 * per-token objectives (token-terms.ts) over every response token of the GLOBAL batch
 * divided by their number, so every data-parallel layout gives the same gradient.
 *
 * How the gradient is formed: the current log-probs are computed on the tape
 * (train/logprobs.ts), read once on the host, and the per-token derivative of the
 * objective with respect to each log-prob becomes the backward seed. One host read of
 * T floats per micro-batch; the gradient is exact (not an approximation).
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import { IGNORE_INDEX } from '../model/synthetic-task.js';
import { targetTokens } from '../train/rows.js';
import type { LossFn, TrainBatch } from '../train/strategy.js';
import { targetLogprobs } from '../train/logprobs.js';
import { registerLoss } from '../train/loss-registry.js';
import { tokenTerms, type TokenTermOptions } from './token-terms.js';

export interface GrpoBatchData {
  /** Sampling log-probs of the target tokens [B·S] (aligned with targets; ignored where the target is IGNORE_INDEX). */
  oldLogprobs: Float32Array;
  /** Reference-policy log-probs [B·S]; needed when beta > 0. */
  refLogprobs?: Float32Array;
  /** One advantage per row [B]. */
  advantages: Float32Array;
}

export interface GrpoLossOptions extends TokenTermOptions {
  /** The sampling temperature (log-probs are taken under it, as the engine returned them). */
  temperature: number;
}

/** Stats keys the loss reports (sums over response tokens; divide by `tokens`). */
export const GRPO_STATS = ['tokens', 'clipped', 'kl', 'ratio', 'logpSum'] as const;

export function checkGrpoData(batch: TrainBatch, data: GrpoBatchData, opts: GrpoLossOptions): void {
  const n = batch.batch * batch.seqLen;
  if (data.oldLogprobs.length !== n) throw new InvalidArgumentError(`GRPO: oldLogprobs has ${data.oldLogprobs.length} entries; expected batch x seqLen = ${n}.`);
  if (data.advantages.length !== batch.batch) throw new InvalidArgumentError(`GRPO: advantages has ${data.advantages.length} entries; expected one per row (${batch.batch}).`);
  if (opts.beta > 0 && data.refLogprobs?.length !== n) {
    throw new InvalidArgumentError(`GRPO: beta = ${opts.beta} needs refLogprobs of batch x seqLen = ${n} entries (got ${data.refLogprobs?.length ?? 'none'}). HINT: set beta to 0 or compute reference log-probs.`);
  }
}

export function grpoLoss(data: GrpoBatchData, opts: GrpoLossOptions): LossFn {
  return async (tape, logits, rows, global) => {
    checkGrpoData(global, data, opts);
    const logp = targetLogprobs(tape, logits, rows.targets, opts.temperature);
    const host = (await logp.value.toArray({ stream: tape.stream })) as Float32Array;
    const total = targetTokens(global);
    const weights = new Float32Array(host.length);
    const base = rows.row0 * rows.seqLen;
    let value = 0, tokens = 0, clipped = 0, kl = 0, ratio = 0, logpSum = 0;
    for (let i = 0; i < host.length; i++) {
      if (rows.targets[i] === IGNORE_INDEX || total === 0) continue;
      const row = rows.row0 + Math.floor(i / rows.seqLen);
      const t = tokenTerms(host[i]!, data.oldLogprobs[base + i]!, data.refLogprobs?.[base + i], data.advantages[row]!, opts);
      weights[i] = t.dObjDLogp / total;
      value += t.obj / total;
      tokens++;
      clipped += t.clipped ? 1 : 0;
      kl += t.kl;
      ratio += t.ratio;
      logpSum += host[i]!;
    }
    return { perToken: logp, weights, value, stats: { tokens, clipped, kl, ratio, logpSum } };
  };
}

// The trainer actor's lossStep('grpo', ...) finds this loss by name (src/train/loss-registry.ts).
registerLoss('grpo', grpoLoss);
