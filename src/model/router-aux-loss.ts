/**
 * The router load-balancing auxiliary loss of the HF MoE models (Transformers'
 * `load_balancing_loss_func`, used by Qwen3-MoE and Qwen3.5-MoE with `output_router_logits`):
 * the router logits of every MoE layer of one forward, concatenated ([L·T, E]);
 * p = softmax(logits) (the router kernel's fp32 probs); the top-k experts of p;
 *   f[k, e] = fraction of the (non-padding) token slots whose k-th choice is e,
 *   P[e]    = mean over the (non-padding) token slots of p[:, e],
 *   aux     = E · Σ_{k,e} f[k, e] · P[e].
 * f carries no gradient; the gradient reaches the router logits through P.
 *
 * Across ranks holding different tokens (data parallel, expert parallel) the statistics are
 * over the whole batch: the counts behind f and the token count N are summed over those ranks
 * (`sumCounts`, k·E + 1 numbers), and each rank returns its share
 *   aux_r = E / N² · Σ_e C[e] · S_r[e]   (C[e] = Σ_k counts[k, e], S_r[e] = Σ_{local slots} p[:, e]),
 * so Σ_r aux_r is the aux of the whole batch and the gradients of the shares sum (as the
 * strategies sum gradients over ranks) to its gradient.
 *
 * Computed on the host from the routing the MoE blocks leave on the tape (Tape.routerTaps):
 * one read of the probs and indices per layer and step, only when the config asks for the loss.
 */
import { matmul, Tensor } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import type { RouterTap, Tape, Var } from './autograd.js';

export interface RouterAuxOptions {
  numExperts: number;
  topK: number;
  /** This rank's tokens' padding mask (1 = token, 0 = pad), T values; absent: every token counts. */
  mask?: Int32Array;
  /**
   * Sums the k·E counts and the token count over the ranks holding other tokens of the batch
   * (absent: one rank). They travel as fp32, exact while a count stays below 2^24 token slots.
   */
  sumCounts?: (local: Float32Array) => Promise<ArrayLike<number>>;
}

/** Counts [k·E + 1]: token slots whose k-th choice is e (at k·E + e), then the non-padding token slots N (L·tokens). */
export function routerCounts(indices: readonly Int32Array[], E: number, k: number, mask?: Int32Array): Float64Array {
  const out = new Float64Array(k * E + 1);
  for (const idx of indices) {
    const T = idx.length / k;
    for (let t = 0; t < T; t++) {
      if (mask && !mask[t]) continue;
      for (let j = 0; j < k; j++) out[j * E + idx[t * k + j]!]! += 1;
      out[k * E]! += 1;
    }
  }
  return out;
}

/**
 * This rank's share of aux from its layers' probs ([T·E] each) and the batch counts, and
 * d(share)/d(logits) per layer ([T·E] each; 0 on pads): with g[e] = E · C[e] / N²,
 * dLogits[t, e] = p[t, e] · (g[e] − Σ_j p[t, j] · g[j]) (the softmax's backward).
 * No token at all (N = 0) gives 0 and no gradient.
 */
export function routerAuxShare(
  probs: readonly Float32Array[],
  counts: ArrayLike<number>,
  E: number,
  k: number,
  mask?: Int32Array,
): { value: number; grads: Float32Array[] } {
  const N = counts[k * E]!;
  const grads = probs.map((p) => new Float32Array(p.length));
  if (N === 0) return { value: 0, grads };
  const g = new Float64Array(E);
  for (let e = 0; e < E; e++) {
    let c = 0;
    for (let j = 0; j < k; j++) c += counts[j * E + e]!;
    g[e] = (E * c) / (N * N);
  }
  let value = 0;
  probs.forEach((p, l) => {
    const T = p.length / E;
    const d = grads[l]!;
    for (let t = 0; t < T; t++) {
      if (mask && !mask[t]) continue;
      let dot = 0;
      for (let e = 0; e < E; e++) dot += p[t * E + e]! * g[e]!;
      value += dot;
      for (let e = 0; e < E; e++) d[t * E + e] = p[t * E + e]! * (g[e]! - dot);
    }
  });
  return { value, grads };
}

/**
 * This rank's share of the aux loss of the forward recorded on `tape` (see the header), as a
 * scalar Var [1] whose backward sends d(share)/d(logits) (times the seed) to every tapped
 * layer's router logits. `value` is the share on the host.
 */
export async function routerAuxLoss(tape: Tape, taps: readonly RouterTap[], o: RouterAuxOptions): Promise<{ aux: Var; value: number }> {
  const { numExperts: E, topK: k, mask } = o;
  const stream = tape.stream;
  for (const tap of taps) {
    const [T, cols] = tap.probs.shape as [number, number];
    if (cols !== E || tap.indices.shape[1] !== k || (mask && mask.length !== T)) {
      throw new InvalidArgumentError(
        `routerAuxLoss(): a router tap has probs [${tap.probs.shape}] and indices [${tap.indices.shape}], but the config has ${E} experts, top-${k}${mask ? ` and the mask ${mask.length} tokens` : ''}. HINT: tap the routers of this model's forward only.`,
      );
    }
  }
  // Every layer's reads in flight at once: one wait for the stream, not two per layer.
  const [probs, indices] = (await Promise.all([
    Promise.all(taps.map((t) => t.probs.toArray({ stream }))),
    Promise.all(taps.map((t) => t.indices.toArray({ stream }))),
  ])) as [Float32Array[], Int32Array[]];
  const local = routerCounts(indices, E, k, mask);
  const counts = o.sumCounts ? await o.sumCounts(Float32Array.from(local)) : local;
  const { value, grads } = routerAuxShare(probs, counts, E, k, mask);
  const out = tape.result(Tensor.fromArray(stream.device, Float32Array.of(value), [1], { stream }), 'router_aux_loss');
  const inputs = taps.map((t) => t.logits);
  tape.record('routerAuxLoss', inputs, [out], ([dA]) =>
    taps.map((tap, l) => {
      const shape = tap.logits.value.shape;
      const G = tape.own(Tensor.fromArray(stream.device, grads[l]!, [grads[l]!.length, 1], { stream }));
      // d(share)/d(logits) times the seed (a device scalar: no host read in backward).
      return tape.own(matmul(G, dA!.reshape([1, 1]), { stream })).reshape(shape);
    }),
  );
  return { aux: out, value };
}
