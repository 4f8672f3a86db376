/**
 * Token log-probs and the exact entropy of the policy's softmax over the whole vocabulary,
 * differentiable, from one kernel (the softmax is computed once): out [2, T] holds
 * log p(target_t) in row 0 and H_t = −Σ_v p_v log p_v in row 1, both under the sampling
 * temperature and 0 where the target is IGNORE_INDEX. A loss seeds both rows at once
 * (weights [2·T]): d/dlogp_t and d/dH_t. Every strategy's logits are full-vocabulary on
 * each rank (megatron keeps its output layer replicated over tp), so the op needs no
 * collective.
 */
import { Tensor } from '../runtime/device/device-index.js';
import type { Tape, Var } from '../model/autograd.js';
import { PATCHES } from '../model/functional.js';
import * as K from '../model/kernels/index.js';

export function tokenLogprobsEntropy(tape: Tape, logits: Var, targets: Int32Array, temperature = 1): Var {
  const o = { stream: tape.stream, impl: tape.impl(PATCHES.crossEntropy), temperature };
  const tgt = tape.own(Tensor.fromArray(logits.value.device, targets, [targets.length], { stream: tape.stream }));
  const r = K.tokenLogprobsEntropy(logits.value, tgt, o);
  tape.own(r.lse);
  const y = tape.result(r.out);
  tape.record('tokenLogprobsEntropy', [logits], [y], ([dy]) => [
    tape.own(K.tokenLogprobsEntropyBackward(dy!.reshape([2, targets.length]), logits.value, tgt, r, o)),
  ]);
  return y;
}
