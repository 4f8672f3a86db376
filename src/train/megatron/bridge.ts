/**
 * The Megatron <-> HF bridge, on the host: parameter names and layouts of
 * Megatron-Core (TE-fused layer-norm naming) for a Qwen3 / Qwen3-MoE config, the
 * conversion of full HF-named tensors (Transformers-5 fused experts) to full
 * Megatron-named tensors and back, and the tensor-parallel slicing / gathering of
 * each Megatron tensor. Every conversion copies float bits (subarray + set), so a
 * round trip is exact.
 *
 * Layouts (H hidden, D head_dim, nH / nKV heads, g = nH / nKV, I intermediate):
 * - `linear_qkv.weight` [(nH + 2 nKV) D, H], rows interleaved by query group: for KV
 *   group j, the g query heads of that group (D rows each), then k_j, then v_j. A TP
 *   shard is a contiguous run of whole groups (tp divides nKV).
 * - dense `linear_fc1.weight` [2I, H] = gate ‖ up; TP shard r holds its gate rows
 *   then its up rows (so the full tensor is NOT the concatenation of the shards).
 * - `linear_proj.weight` / `linear_fc2.weight`: row parallel (shards split dim 1).
 * - experts `mlp.experts.local_experts.{e}.linear_fc1.weight` [2I, H] (gate ‖ up, the
 *   same bytes as expert e of HF `gate_up_proj`) and `.linear_fc2.weight` [H, I]; in
 *   the full (unsharded) naming e is the global expert index.
 * - embedding, output layer, norms, q/k layernorms, router: replicated over TP (the
 *   embedding and output layer are NOT vocab-parallel here; see strategy.ts).
 */
import { InvalidArgumentError, InternalError } from '../../runtime/errors.js';
import { isMoeLayer, type ModelConfig } from '../../model/config.js';
import type { HostParam } from '../../model/param-store.js';
import { fusedExpertNames, paramSpecs } from '../../model/params.js';

/** How a Megatron tensor is split over tensor-parallel ranks. */
export type TpSplit = 'replicated' | 'column' | 'row' | 'gate-up';

export interface MegatronSpec {
  name: string;
  shape: number[];
  tp: TpSplit;
  layer?: number;
  /** Global expert index (expert tensors only). */
  expert?: number;
}

const L = (i: number) => `decoder.layers.${i}`;
export const expertNames = (layer: number, e: number) => ({
  fc1: `${L(layer)}.mlp.experts.local_experts.${e}.linear_fc1.weight`,
  fc2: `${L(layer)}.mlp.experts.local_experts.${e}.linear_fc2.weight`,
});

/** Every full (unsharded) Megatron parameter of `cfg`, in model order. */
export function megatronSpecs(cfg: ModelConfig): MegatronSpec[] {
  const { hiddenSize: H, headDim: D, numHeads: nH, numKvHeads: nKV } = cfg;
  const out: MegatronSpec[] = [{ name: 'embedding.word_embeddings.weight', shape: [cfg.vocabSize, H], tp: 'replicated' }];
  for (let i = 0; i < cfg.numLayers; i++) {
    const p = L(i);
    const add = (name: string, shape: number[], tp: TpSplit, expert?: number) =>
      out.push(expert === undefined ? { name, shape, tp, layer: i } : { name, shape, tp, layer: i, expert });
    add(`${p}.self_attention.linear_qkv.layer_norm_weight`, [H], 'replicated');
    add(`${p}.self_attention.linear_qkv.weight`, [(nH + 2 * nKV) * D, H], 'column');
    add(`${p}.self_attention.q_layernorm.weight`, [D], 'replicated');
    add(`${p}.self_attention.k_layernorm.weight`, [D], 'replicated');
    add(`${p}.self_attention.linear_proj.weight`, [H, nH * D], 'row');
    if (isMoeLayer(cfg, i)) {
      const { numExperts: E, intermediateSize: I } = cfg.moe!;
      add(`${p}.pre_mlp_layernorm.weight`, [H], 'replicated');
      add(`${p}.mlp.router.weight`, [E, H], 'replicated');
      for (let e = 0; e < E; e++) {
        const n = expertNames(i, e);
        add(n.fc1, [2 * I, H], 'replicated', e);
        add(n.fc2, [H, I], 'replicated', e);
      }
    } else {
      const I = cfg.intermediateSize;
      add(`${p}.mlp.linear_fc1.layer_norm_weight`, [H], 'replicated');
      add(`${p}.mlp.linear_fc1.weight`, [2 * I, H], 'gate-up');
      add(`${p}.mlp.linear_fc2.weight`, [H, I], 'row');
    }
  }
  out.push({ name: 'decoder.final_layernorm.weight', shape: [H], tp: 'replicated' });
  if (!cfg.tieWordEmbeddings) out.push({ name: 'output_layer.weight', shape: [cfg.vocabSize, H], tp: 'replicated' });
  return out;
}

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

/** q [nH·D, H], k and v [nKV·D, H] → linear_qkv [(nH + 2nKV)·D, H], interleaved by query group. */
export function interleaveQkv(cfg: ModelConfig, q: Float32Array, k: Float32Array, v: Float32Array): Float32Array {
  const { hiddenSize: H, headDim: D, numHeads: nH, numKvHeads: nKV } = cfg;
  const g = nH / nKV;
  const out = new Float32Array((nH + 2 * nKV) * D * H);
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
  const { hiddenSize: H, headDim: D, numHeads: nH, numKvHeads: nKV } = cfg;
  const g = nH / nKV;
  const q = new Float32Array(nH * D * H),
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
  const hfSpecs = paramSpecs(cfg, { expertLayout: 'fused' });
  const shapeOf = new Map(hfSpecs.map((s) => [s.name, s.shape]));
  checkNoExtra(hf, shapeOf.keys(), 'HF', "pass exactly the model's HF parameters with experts in the fused layout (convertExpertLayout(..., 'fused')).");
  const get = (name: string) => need(hf, name, shapeOf.get(name)!, 'HF');
  const copyOf = (name: string) => hp(shapeOf.get(name)!, get(name).data.slice());
  const out = new Map<string, HostParam>();
  for (const spec of megatronSpecs(cfg)) {
    const { name, shape, layer: i } = spec;
    const p = i === undefined ? '' : `model.layers.${i}`;
    let data: Float32Array;
    if (name === 'embedding.word_embeddings.weight') data = copyOf('model.embed_tokens.weight').data;
    else if (name === 'output_layer.weight') data = copyOf('lm_head.weight').data;
    else if (name === 'decoder.final_layernorm.weight') data = copyOf('model.norm.weight').data;
    else if (name.endsWith('linear_qkv.layer_norm_weight')) data = copyOf(`${p}.input_layernorm.weight`).data;
    else if (name.endsWith('linear_qkv.weight'))
      data = interleaveQkv(cfg, get(`${p}.self_attn.q_proj.weight`).data, get(`${p}.self_attn.k_proj.weight`).data, get(`${p}.self_attn.v_proj.weight`).data);
    else if (name.endsWith('q_layernorm.weight')) data = copyOf(`${p}.self_attn.q_norm.weight`).data;
    else if (name.endsWith('k_layernorm.weight')) data = copyOf(`${p}.self_attn.k_norm.weight`).data;
    else if (name.endsWith('linear_proj.weight')) data = copyOf(`${p}.self_attn.o_proj.weight`).data;
    else if (name.endsWith('pre_mlp_layernorm.weight') || name.endsWith('linear_fc1.layer_norm_weight'))
      data = copyOf(`${p}.post_attention_layernorm.weight`).data;
    else if (name.endsWith('mlp.router.weight')) data = copyOf(`${p}.mlp.gate.weight`).data;
    else if (spec.expert !== undefined) {
      const f = fusedExpertNames(i!);
      const src = name.endsWith('linear_fc1.weight') ? get(f.gateUp) : get(f.down);
      const n = numel(shape);
      data = src.data.slice(spec.expert * n, (spec.expert + 1) * n);
    } else if (name.endsWith('mlp.linear_fc1.weight')) data = concat(get(`${p}.mlp.gate_proj.weight`).data, get(`${p}.mlp.up_proj.weight`).data);
    else if (name.endsWith('mlp.linear_fc2.weight')) data = copyOf(`${p}.mlp.down_proj.weight`).data;
    else throw new InternalError(`bridge: no HF source for ${name}`);
    out.set(name, hp(shape, data));
  }
  return out;
}

/** Full Megatron-named parameters → full HF-named parameters (fused experts), in HF order. */
export function megatronToHf(cfg: ModelConfig, meg: ReadonlyMap<string, HostParam>): Map<string, HostParam> {
  const specs = megatronSpecs(cfg);
  const shapeOf = new Map(specs.map((s) => [s.name, s.shape]));
  checkNoExtra(meg, shapeOf.keys(), 'Megatron', 'pass the full (TP/EP-gathered) Megatron parameters of this config.');
  const get = (name: string) => need(meg, name, shapeOf.get(name)!, 'Megatron').data;
  const out = new Map<string, HostParam>();
  for (const s of paramSpecs(cfg, { expertLayout: 'fused' })) {
    const { name, shape, layer: i } = s;
    const m = i === undefined ? '' : L(i);
    let data: Float32Array;
    if (name === 'model.embed_tokens.weight') data = get('embedding.word_embeddings.weight').slice();
    else if (name === 'lm_head.weight') data = get('output_layer.weight').slice();
    else if (name === 'model.norm.weight') data = get('decoder.final_layernorm.weight').slice();
    else if (name.endsWith('input_layernorm.weight')) data = get(`${m}.self_attention.linear_qkv.layer_norm_weight`).slice();
    else if (/self_attn\.[qkv]_proj\.weight$/.test(name))
      data = splitQkv(cfg, get(`${m}.self_attention.linear_qkv.weight`))[name.split('.').at(-2)![0] as 'q' | 'k' | 'v'];
    else if (name.endsWith('q_norm.weight')) data = get(`${m}.self_attention.q_layernorm.weight`).slice();
    else if (name.endsWith('k_norm.weight')) data = get(`${m}.self_attention.k_layernorm.weight`).slice();
    else if (name.endsWith('o_proj.weight')) data = get(`${m}.self_attention.linear_proj.weight`).slice();
    else if (name.endsWith('post_attention_layernorm.weight'))
      data = get(isMoeLayer(cfg, i!) ? `${m}.pre_mlp_layernorm.weight` : `${m}.mlp.linear_fc1.layer_norm_weight`).slice();
    else if (name.endsWith('mlp.gate.weight')) data = get(`${m}.mlp.router.weight`).slice();
    else if (name.endsWith('experts.gate_up_proj') || name.endsWith('experts.down_proj')) {
      const fc = name.endsWith('gate_up_proj') ? 'fc1' : 'fc2';
      data = concat(...Array.from({ length: cfg.moe!.numExperts }, (_, e) => get(expertNames(i!, e)[fc])));
    } else if (name.endsWith('gate_proj.weight') || name.endsWith('up_proj.weight')) {
      const fc1 = get(`${m}.mlp.linear_fc1.weight`);
      const half = fc1.length / 2;
      data = name.endsWith('gate_proj.weight') ? fc1.slice(0, half) : fc1.slice(half);
    } else if (name.endsWith('down_proj.weight')) data = get(`${m}.mlp.linear_fc2.weight`).slice();
    else throw new InternalError(`bridge: no Megatron source for ${name}`);
    out.set(name, hp(shape, data));
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
