/**
 * Differentiable per-token log-probabilities on the tape: logp[t] = log softmax(logits[t] / T)[target[t]]
 * (0 where target is IGNORE_INDEX), with the temperature applied inside the kernel; and the
 * eval-mode pass that reads them for a rank's rows of a batch (old-policy, reference and
 * weight-sync probe log-probs all come from it).
 */
import { Tensor } from '../runtime/device/device-index.js';
import type { Tape, Var } from '../model/autograd.js';
import { PATCHES } from '../model/functional.js';
import * as K from '../model/kernels/index.js';
import type { LossFn, TrainBatch, TrainStrategy } from './strategy.js';
import { widenRows } from './rows.js';

export function tokenLogprobs(tape: Tape, logits: Var, targets: Tensor, temperature = 1): Var {
  const o = { stream: tape.stream, impl: tape.impl(PATCHES.crossEntropy), temperature };
  const r = K.tokenLogprobsWithLse(logits.value, targets, o);
  tape.own(r.lse);
  const y = tape.result(r.logprobs);
  tape.record('tokenLogprobs', [logits], [y], ([dy]) => [tape.own(K.tokenLogprobsBackward(dy!, logits.value, targets, r.lse, o))]);
  return y;
}

/** tokenLogprobs() of host targets (uploaded on the tape's stream, freed with the tape). */
export function targetLogprobs(tape: Tape, logits: Var, targets: Int32Array, temperature = 1): Var {
  const t = tape.own(Tensor.fromArray(logits.value.device, targets, [targets.length], { stream: tape.stream }));
  return tokenLogprobs(tape, logits, t, temperature);
}

export interface RowLogprobs {
  /** First global row this rank computed, and how many. */
  row0: number;
  rows: number;
  /** [rows·seqLen] at the batch's seqLen: position t of a row holds log p(target t) (0 past the rank's trimmed width). */
  logprobs: Float32Array;
}

/** Target-token log-probs of this rank's data-parallel rows (an eval-mode forward: no dropout, gradients untouched). */
export async function rowLogprobs(s: TrainStrategy, batch: TrainBatch, temperature: number): Promise<RowLogprobs> {
  let out: RowLogprobs | null = null;
  const capture: LossFn = async (tape, logits, rows) => {
    const lp = targetLogprobs(tape, logits, rows.targets, temperature);
    const local = (await lp.value.toArray({ stream: tape.stream })) as Float32Array;
    out = { row0: rows.row0, rows: rows.rows, logprobs: widenRows(local, rows.rows, rows.seqLen, batch.seqLen) };
    return { perToken: lp, weights: new Float32Array(lp.value.numel) };
  };
  await s.forward(batch, capture);
  return out!;
}
