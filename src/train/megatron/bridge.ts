/**
 * The Megatron <-> HF bridge, on the host: the conversion of full HF-named tensors
 * (Transformers-5 fused experts) to full Megatron-named tensors (specs.ts says which and
 * of what) and back, and the tensor-parallel slicing / gathering of each Megatron tensor.
 * Every conversion copies float bits (subarray + set), so a round trip is exact.
 *
 * Layouts (H hidden, D head_dim, nH / nKV heads, q = query row blocks: nH, or 2·nH for
 * Qwen3.5's gated q_proj; g = q / nKV, I intermediate):
 * - `linear_qkv.weight` [(q + 2 nKV) D, H], rows interleaved by query group: for KV
 *   group j, its g query blocks (D rows each), then k_j, then v_j. A TP shard is a
 *   contiguous run of whole groups (tp divides nKV).
 * - `linear_fc1.weight` (dense MLP, shared expert) [2I, H] = gate ‖ up; TP shard r holds
 *   its gate rows then its up rows (so the full tensor is NOT the concatenation of the shards).
 * - `linear_proj.weight` / `linear_fc2.weight`: row parallel (shards split dim 1).
 * - experts `mlp.experts.local_experts.{e}.linear_fc1.weight` [2I, H] (gate ‖ up, the
 *   same bytes as expert e of HF `gate_up_proj`) and `.linear_fc2.weight` [H, I]; in
 *   the full (unsharded) naming e is the global expert index.
 * - embedding, output layer, norms, q/k layernorms, router, Gated DeltaNet tensors:
 *   replicated over TP (the embedding and output layer are NOT vocab-parallel here; see
 *   strategy.ts).
 */
import { InvalidArgumentError, InternalError } from '../../runtime/errors.js';
import type { ModelConfig } from '../../model/config.js';
import type { HostParam } from '../../model/param-store.js';
import { paramSpecs } from '../../model/params.js';
import { expertNames, megatronSpecs, qkvQueryHeads, type MegatronSpec, type TpSplit } from './specs.js';

export { expertNames, megatronSpecs, type MegatronSpec, type TpSplit };

const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

function need(map: ReadonlyMap<string, HostParam>, name: string, shape: readonly number[], side: string): HostParam {
  const p = map.get(name);
  if (!p) throw new InvalidArgumentError(`Bridge: ${side} tensor ${name} is missing.`, { name });
  if (p.shape.length !== shape.length || p.shape.some((d, k) => d !== shape[k]) || p.data.length !== numel(shape)) {
    throw new InvalidArgumentError(
      `Bridge: ${side} tensor ${name} has shape [${p.shape.join(', ')}] (${p.data.length} values) but the config needs [${shape.join(', ')}].`,
      { name },
    );
  }
  return p;
}

function checkNoExtra(map: ReadonlyMap<string, HostParam>, expected: Iterable<string>, side: string, hint: string): void {
  const want = new Set(expected);
  const extra = [...map.keys()].filter((n) => !want.has(n));
  if (extra.length) {
    throw new InvalidArgumentError(
      `Bridge: unexpected ${side} tensors [${extra.slice(0, 5).join(', ')}${extra.length > 5 ? `, and ${extra.length - 5} more` : ''}]. HINT: ${hint}`,
      { extra },
    );
  }
}

/** Rows [r0, r0 + n) of a row-major matrix with `cols` columns. */
const rows = (data: Float32Array, cols: number, r0: number, n: number) => data.subarray(r0 * cols, (r0 + n) * cols);

/** q [qh·D, H] (qh query row blocks), k and v [nKV·D, H] → linear_qkv [(qh + 2nKV)·D, H], interleaved by query group. */
export function interleaveQkv(cfg: ModelConfig, q: Float32Array, k: Float32Array, v: Float32Array): Float32Array {
  const { hiddenSize: H, headDim: D, numKvHeads: nKV } = cfg;
  const g = qkvQueryHeads(cfg) / nKV;
  const out = new Float32Array((g + 2) * nKV * D * H);
  let r = 0;
  for (let j = 0; j < nKV; j++) {
    out.set(rows(q, H, j * g * D, g * D), r * H);
    r += g * D;
    out.set(rows(k, H, j * D, D), r * H);
    r += D;
    out.set(rows(v, H, j * D, D), r * H);
    r += D;
  }
  return out;
}

/** Inverse of interleaveQkv. */
export function splitQkv(cfg: ModelConfig, qkv: Float32Array): { q: Float32Array; k: Float32Array; v: Float32Array } {
  const { hiddenSize: H, headDim: D, numKvHeads: nKV } = cfg;
  const g = qkvQueryHeads(cfg) / nKV;
  const q = new Float32Array(g * nKV * D * H),
    k = new Float32Array(nKV * D * H),
    v = new Float32Array(nKV * D * H);
  let r = 0;
  for (let j = 0; j < nKV; j++) {
    q.set(rows(qkv, H, r, g * D), j * g * D * H);
    r += g * D;
    k.set(rows(qkv, H, r, D), j * D * H);
    r += D;
    v.set(rows(qkv, H, r, D), j * D * H);
    r += D;
  }
  return { q, k, v };
}

/** The arrays one after another in one new array. */
export function concat(...parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

const hp = (shape: readonly number[], data: Float32Array): HostParam => ({ shape: [...shape], data });

/** Full HF-named parameters (fused experts) → full Megatron-named parameters. */
export function hfToMegatron(cfg: ModelConfig, hf: ReadonlyMap<string, HostParam>): Map<string, HostParam> {
  const shapeOf = new Map(paramSpecs(cfg, { expertLayout: 'fused' }).map((s) => [s.name, s.shape]));
  checkNoExtra(hf, shapeOf.keys(), 'HF', "pass exactly the model's HF parameters with experts in the fused layout (convertExpertLayout(..., 'fused')).");
  const get = (name: string) => need(hf, name, shapeOf.get(name)!, 'HF').data;
  const out = new Map<string, HostParam>();
  for (const spec of megatronSpecs(cfg)) {
    const src = spec.hf;
    let data: Float32Array;
    if (src.kind === 'copy') data = get(src.hf).slice();
    else if (src.kind === 'qkv') data = interleaveQkv(cfg, get(src.q), get(src.k), get(src.v));
    else if (src.kind === 'gate-up') data = concat(get(src.gate), get(src.up));
    else {
      const n = numel(spec.shape);
      data = get(src.hf).slice(spec.expert! * n, (spec.expert! + 1) * n);
    }
    out.set(spec.name, hp(spec.shape, data));
  }
  return out;
}

/** Full Megatron-named parameters → full HF-named parameters (fused experts), in HF order. */
export function megatronToHf(cfg: ModelConfig, meg: ReadonlyMap<string, HostParam>): Map<string, HostParam> {
  const specs = megatronSpecs(cfg);
  checkNoExtra(
    meg,
    specs.map((s) => s.name),
    'Megatron',
    'pass the full (TP/EP-gathered) Megatron parameters of this config.',
  );
  const parts = new Map<string, Float32Array[]>(); // HF name → its pieces (one, or the experts in order)
  const put = (name: string, data: Float32Array) => parts.set(name, [...(parts.get(name) ?? []), data]);
  for (const spec of specs) {
    const data = need(meg, spec.name, spec.shape, 'Megatron').data;
    const src = spec.hf;
    if (src.kind === 'copy' || src.kind === 'expert') put(src.hf, data);
    else if (src.kind === 'qkv') {
      const { q, k, v } = splitQkv(cfg, data);
      put(src.q, q);
      put(src.k, k);
      put(src.v, v);
    } else {
      put(src.gate, data.slice(0, data.length / 2));
      put(src.up, data.slice(data.length / 2));
    }
  }
  const out = new Map<string, HostParam>();
  for (const s of paramSpecs(cfg, { expertLayout: 'fused' })) {
    const p = parts.get(s.name);
    if (!p) throw new InternalError(`bridge: no Megatron source for ${s.name}`);
    out.set(s.name, hp(s.shape, p.length === 1 ? p[0]!.slice() : concat(...p)));
  }
  return out;
}

/** The local shape of a Megatron tensor on one of `tp` ranks. */
export function tpLocalShape(spec: Pick<MegatronSpec, 'shape' | 'tp'>, tp: number): number[] {
  const [a, b] = spec.shape;
  if (spec.tp === 'column' || spec.tp === 'gate-up') return [a! / tp, b!];
  if (spec.tp === 'row') return [a!, b! / tp];
  return [...spec.shape];
}

/** TP rank `rank`'s shard of a full Megatron tensor (a copy). */
export function tpSlice(spec: Pick<MegatronSpec, 'name' | 'shape' | 'tp'>, full: HostParam, tp: number, rank: number): HostParam {
  const local = tpLocalShape(spec, tp);
  const [R, C] = spec.shape as [number, number];
  switch (spec.tp) {
    case 'replicated':
      return hp(local, full.data.slice());
    case 'column':
      return hp(local, rows(full.data, C, rank * local[0]!, local[0]!).slice());
    case 'gate-up': {
      const I = R / 2,
        Il = I / tp;
      return hp(local, concat(rows(full.data, C, rank * Il, Il), rows(full.data, C, I + rank * Il, Il)));
    }
    case 'row': {
      const Cl = local[1]!;
      const out = new Float32Array(R * Cl);
      for (let r = 0; r < R; r++) out.set(full.data.subarray(r * C + rank * Cl, r * C + (rank + 1) * Cl), r * Cl);
      return hp(local, out);
    }
  }
}

/** The full Megatron tensor from the shards of every TP rank, in rank order (inverse of tpSlice). */
export function tpGather(spec: Pick<MegatronSpec, 'name' | 'shape' | 'tp'>, shards: readonly HostParam[]): HostParam {
  const tp = shards.length;
  const local = tpLocalShape(spec, tp);
  shards.forEach((s, r) => {
    if (s.data.length !== numel(local)) {
      throw new InvalidArgumentError(
        `tpGather(${spec.name}): shard ${r} has ${s.data.length} values but a 1/${tp} shard of [${spec.shape.join(', ')}] is [${local.join(', ')}].`,
        { name: spec.name },
      );
    }
  });
  const [R, C] = spec.shape as [number, number];
  switch (spec.tp) {
    case 'replicated':
      return hp(spec.shape, shards[0]!.data.slice());
    case 'column':
      return hp(spec.shape, concat(...shards.map((s) => s.data)));
    case 'gate-up': {
      const half = numel(local) / 2;
      return hp(spec.shape, concat(...shards.map((s) => s.data.subarray(0, half)), ...shards.map((s) => s.data.subarray(half))));
    }
    case 'row': {
      const Cl = local[1]!;
      const out = new Float32Array(R * C);
      shards.forEach((s, q) => {
        for (let r = 0; r < R; r++) out.set(s.data.subarray(r * Cl, (r + 1) * Cl), r * C + q * Cl);
      });
      return hp(spec.shape, out);
    }
  }
}
