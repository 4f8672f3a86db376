/** Comparing two strategies' gradients (or any named tensors) gathered on the host. */
import { maxRelErr } from './rollout-reference.js';

type Named = ReadonlyMap<string, { data: Float32Array }>;

/**
 * The worst maxRelErr over the tensors of `a` against the same names in `b` (the reference);
 * tensors that are all zero in `b` have no scale and are left out.
 */
export function maxRelOverTensors(a: Named, b: Named): number {
  let worst = 0;
  for (const [name, p] of a) {
    const q = b.get(name)!.data;
    if (q.some((v) => v !== 0)) worst = Math.max(worst, maxRelErr(p.data, q));
  }
  return worst;
}
