/**
 * The differentiable split of a `linear_qkv` output into q, k and v. The columns of
 * qkv [T, nKV·(g+2)·D] (this TP rank's KV groups) are, per KV group j: its g query
 * heads, then k_j, then v_j (Megatron's interleaving by query group; see bridge.ts).
 * q comes out [T, nKV·g·D] with query head j·g + i = group j's i-th head, which is the
 * grouped-query order the attention kernel expects (kv head = floor(h / g)).
 * Forward: one permute to [g+2, T, nKV, D] (parts become contiguous), then q is
 * permuted back; backward writes dq / dk / dv into one buffer and permutes it back.
 */
import { copy, fill, permute, Tensor } from '../../runtime/device/device-index.js';
import { Var, type Tape } from '../../model/autograd.js';
import { viewOf } from './views.js';

export function splitQkv(tape: Tape, qkv: Var, nKV: number, g: number, D: number): { q: Var; k: Var; v: Var } {
  const stream = tape.stream;
  const T = qkv.value.shape[0]!;
  const part = T * nKV * D; // elements of one head slot over every token and group
  const byParts = tape.own(permute(qkv.value.reshape([T, nKV, g + 2, D]), [2, 0, 1, 3], { stream }));
  const q = tape.result(permute(viewOf(byParts, 0, [g, T, nKV, D]), [1, 2, 0, 3], { stream }).reshape([T, nKV * g * D]));
  const k = new Var(viewOf(byParts, g * part, [T, nKV * D]));
  const v = new Var(viewOf(byParts, (g + 1) * part, [T, nKV * D]));
  tape.record('splitQkv', [qkv], [q, k, v], ([dq, dk, dv]) => {
    const buf = tape.own(Tensor.empty(qkv.value.device, [g + 2, T, nKV, D], 'fp32'));
    const qSlot = viewOf(buf, 0, [g, T, nKV, D]);
    if (dq) {
      const t = permute(dq.reshape([T, nKV, g, D]), [2, 0, 1, 3], { stream });
      copy(qSlot, t, { stream });
      t.release();
    } else fill(qSlot, 0, { stream });
    for (const [d, slot] of [
      [dk, g],
      [dv, g + 1],
    ] as const) {
      const view = viewOf(buf, slot * part, [T, nKV * D]);
      if (d) copy(view, d, { stream });
      else fill(view, 0, { stream });
    }
    return [tape.own(permute(buf, [1, 2, 0, 3], { stream })).reshape([T, nKV * (g + 2) * D])];
  });
  return { q, k, v };
}
