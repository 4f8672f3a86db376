/**
 * The device side of a weight source's HF mapping (weight-sources.ts): from the parts of a
 * source side by side (rank-major, each `localNumel` elements, as an all-gather over the
 * placement's communicator leaves them; or the local piece itself when parts = 1) to the
 * full HF tensors, by strided reads into `scratch` (never more than one source's size):
 *
 *   identity / experts, Shard(0) or whole → the first numel elements, a view (no copy)
 *   identity, Shard(d > 0)                → [outer, parts, n·inner] read into scratch
 *   qkv                                   → the interleaved tensor de-interleaved into q, k, v
 *   gate-up                               → part t = gate_t ‖ up_t read into gate, up
 */
import type { Stream, Tensor } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import { stridedRead, viewOf } from '../runtime/device/views.js';
import { numelOf, type SourceDescriptor } from './weight-sources.js';

/** Elements of scratch assembleHf() needs for `d` (0: none, the result is a view of the parts). */
export function scratchNumel(d: SourceDescriptor): number {
  const dim = d.placement.kind === 'shard' ? d.placement.dim : 0;
  if (d.map.kind === 'qkv') return numelOf(d.shape);
  return d.parts > 1 && (d.map.kind === 'gate-up' || dim > 0) ? numelOf(d.shape) : 0;
}

/**
 * The HF tensors of source `d` from its parts side by side in `parts` ([d.parts · d.localNumel]).
 * Results are views into `parts` or `scratch`; they stay valid until those are reused (stream order).
 */
export function assembleHf(d: SourceDescriptor, parts: Tensor, scratch: Tensor | null, stream: Stream): Array<[string, Tensor]> {
  const S = d.shape,
    N = numelOf(S),
    P = d.parts,
    n = d.localNumel;
  const dim = d.placement.kind === 'shard' ? d.placement.dim : 0;
  const m = d.map;
  const need = (what: string) => {
    if (!scratch || scratch.numel < N)
      throw new InvalidArgumentError(`assembleHf(${d.key}): ${what} needs a scratch of ${N} elements. HINT: size it with scratchNumel().`, { source: d.key });
    return scratch;
  };
  if (P > 1 && (dim > 0 || m.kind !== 'identity') && P * n !== N) {
    throw new InvalidArgumentError(
      `assembleHf(${d.key}): ${P} parts of ${n} elements do not tile [${S.join(', ')}]. HINT: a ${m.kind} source over Shard(${dim}) needs parts that divide its dim.`,
      { source: d.key },
    );
  }
  if (m.kind === 'identity' || m.kind === 'experts') {
    if (P === 1 || dim === 0) return [[m.hf, viewOf(parts, S)]];
    const outer = numelOf(S.slice(0, dim)),
      rows = n / outer;
    const full = viewOf(need('a Shard(d > 0) source'), S);
    stridedRead(full.reshape([N]), parts, [outer, P, rows], [rows, n, 1], 0, stream);
    return [[m.hf, full]];
  }
  const H = S[1]!;
  const src = viewOf(parts, [N]);
  if (m.kind === 'gate-up') {
    const I = S[0]! / 2;
    if (P === 1)
      return [
        [m.gate, viewOf(parts, [I, H])],
        [m.up, viewOf(parts, [I, H], I * H)],
      ];
    const out = need('a gate-up source');
    const gate = viewOf(out, [I, H], 0),
      up = viewOf(out, [I, H], I * H);
    stridedRead(gate.reshape([I * H]), src, [P, n / 2], [n, 1], 0, stream);
    stridedRead(up.reshape([I * H]), src, [P, n / 2], [n, 1], n / 2, stream);
    return [
      [m.gate, gate],
      [m.up, up],
    ];
  }
  // qkv: whole groups per part, so the parts side by side are the interleaved tensor.
  const { heads: nH, kvHeads: nKV, headDim: D } = m;
  const g = nH / nKV,
    grp = (g + 2) * D * H;
  const out = need('a qkv source');
  const q = viewOf(out, [nH * D, H], 0),
    k = viewOf(out, [nKV * D, H], nH * D * H),
    v = viewOf(out, [nKV * D, H], (nH + nKV) * D * H);
  stridedRead(q.reshape([q.numel]), src, [nKV, g * D * H], [grp, 1], 0, stream);
  stridedRead(k.reshape([k.numel]), src, [nKV, D * H], [grp, 1], g * D * H, stream);
  stridedRead(v.reshape([v.numel]), src, [nKV, D * H], [grp, 1], (g + 1) * D * H, stream);
  return [
    [m.q, q],
    [m.k, k],
    [m.v, v],
  ];
}
