/**
 * Differentiable per-token log-probabilities on the tape: logp[t] = log softmax(logits[t] / T)[target[t]]
 * (0 where target is IGNORE_INDEX), with the temperature applied inside the kernel.
 */
import type { Tensor } from '../runtime/device-index.js';
import type { Tape, Var } from '../model/autograd.js';
import { PATCHES } from '../model/functional.js';
import * as K from '../model/kernels/index.js';

export function tokenLogprobs(tape: Tape, logits: Var, targets: Tensor, temperature = 1): Var {
  const o = { stream: tape.stream, impl: tape.impl(PATCHES.crossEntropy), temperature };
  const r = K.tokenLogprobsWithLse(logits.value, targets, o);
  tape.own(r.lse);
  const y = tape.result(r.logprobs);
  tape.record('tokenLogprobs', [logits], [y], ([dy]) => [tape.own(K.tokenLogprobsBackward(dy!, logits.value, targets, r.lse, o))]);
  return y;
}
