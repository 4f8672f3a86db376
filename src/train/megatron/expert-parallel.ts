/**
 * The MoE block with expert parallelism over the `ep` group, Megatron's all-to-all
 * token dispatcher: every rank routes its own tokens over all E experts, EP rank q
 * owns experts [q·El, (q+1)·El) (El = E / ep) and runs them on the tokens every rank
 * sends it.
 *
 *   1. router logits → softmax top-k (K.routerTopK); token slots sorted by expert
 *      (K.moeDispatch + moeGather), so the rows for rank q are one contiguous run;
 *   2. per-expert counts exchanged with allToAll; ONE host read per MoE layer of
 *      [my counts ‖ counts sent to me] gives the allToAllV splits (Megatron reads
 *      them on the host too); this is the only host sync of the block;
 *   3. allToAllV of the token rows (arriving grouped by source rank, then expert),
 *      a row permutation to expert-major order, grouped matmuls gate‖up → SwiGLU →
 *      down over the local experts (device-side offsets), the inverse permutation,
 *      allToAllV back, weighted combine.
 * Backward runs the reverse all-to-alls (comm-ops.ts). The row permutations are
 * moeGather with k = 1 (its backward scatters rows back).
 */
import { copy, Tensor } from '../../runtime/device/device-index.js';
import type { Communicator } from '../../runtime/comm/comm.js';
import type { Tape, Var } from '../../model/autograd.js';
import * as F from '../../model/functional.js';
import * as K from '../../model/kernels/index.js';
import { allToAllRows, type PendingComms } from './comm-ops.js';
import { viewOf } from './views.js';

export interface ExpertParallelWeights {
  /** Router [E, H] (all experts). */
  router: Var;
  /** This rank's experts, gate‖up [El, 2I, H] (Megatron linear_fc1 of each local expert, stacked). */
  fc1: Var;
  /** This rank's experts, [El, H, I] (linear_fc2 of each local expert, stacked). */
  fc2: Var;
}

/** Rows gathered by an index held on the host (uploaded once): y[r] = x[index[r]]. */
function gatherRows(tape: Tape, x: Var, index: Int32Array): Var {
  const stream = tape.stream;
  const idx = tape.own(Tensor.fromArray(x.value.device, index, [index.length], { stream }));
  const y = tape.result(K.moeGather(x.value, idx, 1, { stream }));
  tape.record('permuteRows', [x], [y], ([dy]) => [tape.own(K.moeGatherBackward(dy!, idx, 1, { stream }))]);
  return y;
}

export async function expertParallelMoe(
  tape: Tape,
  x: Var,
  w: ExpertParallelWeights,
  topK: number,
  renorm: boolean,
  ep: Communicator,
  pending: PendingComms,
  adapters?: Partial<F.MoeAdapters>,
): Promise<Var> {
  const stream = tape.stream;
  const device = x.value.device;
  const E = w.router.value.shape[0]!;
  const P = ep.size;
  const El = E / P;
  // 1. Route and sort this rank's token slots by expert.
  const logits = F.linear(tape, x, w.router);
  const r = K.routerTopK(logits.value, topK, renorm, { stream, impl: tape.impl(F.PATCHES.router) });
  tape.own(r.probs);
  tape.own(r.indices);
  tape.routerTaps?.push({ logits, probs: r.probs, indices: r.indices });
  const weights = tape.result(r.weights);
  tape.record('router', [logits], [weights], ([dW]) => [
    tape.own(K.routerBackward(dW!, r.probs, r.indices, renorm, { stream, impl: tape.impl(F.PATCHES.router) })),
  ]);
  const eo = { stream, impl: tape.impl(F.PATCHES.experts) };
  const d = K.moeDispatch(r.indices, E, eo);
  for (const t of [d.counts, d.offsets, d.order]) tape.own(t);
  const xs = tape.result(K.moeGather(x.value, d.order, topK, eo));
  tape.record('moeGather', [x], [xs], ([dXs]) => [tape.own(K.moeGatherBackward(dXs!, d.order, topK, eo))]);

  // 2. Exchange per-expert counts; one host read of [mine ‖ received].
  const both = tape.own(Tensor.empty(device, [2 * E], 'int32'));
  const mine = viewOf(both, 0, [E]);
  const theirs = viewOf(both, E, [E]);
  copy(mine, d.counts, { stream });
  pending.track(ep.allToAll(mine, theirs, stream));
  const counts = (await both.toArray({ stream })) as Int32Array;
  const sendRows = Array.from({ length: P }, (_, q) => sum(counts, q * El, El));
  // received: block p holds rank p's counts for my El experts.
  const recv = (p: number, e: number) => counts[E + p * El + e]!;
  const recvRows = Array.from({ length: P }, (_, p) => sum(counts, E + p * El, El));

  // 3. Dispatch, expert-major permutation, local experts, back.
  const got = allToAllRows(tape, xs, ep, sendRows, recvRows, pending);
  const R = got.value.shape[0]!;
  const perm = new Int32Array(R);
  const offsets = new Int32Array(El + 1);
  const blockStart = (p: number, e: number) => {
    let o = 0;
    for (let q = 0; q < p; q++) o += recvRows[q]!;
    for (let f = 0; f < e; f++) o += recv(p, f);
    return o;
  };
  let n = 0;
  for (let e = 0; e < El; e++) {
    for (let p = 0; p < P; p++) {
      const s = blockStart(p, e);
      for (let j = 0; j < recv(p, e); j++) perm[n++] = s + j;
    }
    offsets[e + 1] = n;
  }
  const inv = new Int32Array(R);
  perm.forEach((src, i) => (inv[src] = i));
  const local = gatherRows(tape, got, perm);
  const off = tape.own(Tensor.fromArray(device, offsets, [El + 1], { stream }));
  // LoRA adapters (local experts' A/B, same expert order as fc1 / fc2) replace the grouped matmuls.
  const gu = adapters?.gateUp ? adapters.gateUp(tape, local, w.fc1, off) : F.groupedLinear(tape, local, w.fc1, off, 'experts.linear_fc1');
  const act = F.swigluFused(tape, gu);
  const ys = adapters?.down ? adapters.down(tape, act, w.fc2, off) : F.groupedLinear(tape, act, w.fc2, off, 'experts.linear_fc2');
  const back = allToAllRows(tape, gatherRows(tape, ys, inv), ep, recvRows, sendRows, pending);

  const y = tape.result(K.moeCombine(back.value, d.order, weights.value, eo));
  tape.record('moeCombine', [back, weights], [y], ([dy]) => {
    const g = K.moeCombineBackward(dy!, back.value, d.order, weights.value, eo);
    return [tape.own(g.dYs), tape.own(g.dWeights)];
  });
  return y;
}

function sum(a: Int32Array, from: number, n: number): number {
  let s = 0;
  for (let i = 0; i < n; i++) s += a[from + i]!;
  return s;
}
