/**
 * Parameters of a Qwen3 / Qwen3-MoE model: HF names and shapes, the two expert layouts,
 * host-side conversion between them, and deterministic initialisation.
 *
 * Expert layouts (per MoE layer L, E experts, per-expert intermediate I, hidden H):
 * - 'fused' (Transformers 5): `model.layers.L.mlp.experts.gate_up_proj` [E, 2I, H], rows of
 *   expert e are gate (I rows) then up (I rows); `model.layers.L.mlp.experts.down_proj` [E, H, I].
 * - 'per-expert' (checkpoint style): `model.layers.L.mlp.experts.e.{gate,up}_proj.weight` [I, H]
 *   and `model.layers.L.mlp.experts.e.down_proj.weight` [H, I].
 * Both are row-major, so expert e's gate, up and down are contiguous byte ranges of the fused
 * tensors: conversion is slicing and concatenation of bytes, exact for every dtype.
 */
import { CheckpointFormatError } from '../runtime/errors.js';
import { isMoeLayer, isQwen35, type ModelConfig } from './config.js';
import { Prng, hashString, mixSeed } from './prng.js';
import { numelOf, safetensorsDTypeSize, type SafetensorsDType } from './safetensors.js';
import { qwen35ParamSpecs, textOnlyWeights } from './params-qwen35.js';
import { fusedExpertNames, perExpertNames } from './expert-names.js';

export const EXPERT_LAYOUTS = ['fused', 'per-expert'] as const;
export type ExpertLayout = (typeof EXPERT_LAYOUTS)[number];

/**
 * What a parameter is, which decides its initial values: Qwen3.5 adds `centred_norm` (the
 * layer scales by 1 + w, so w starts at 0), the GDN `conv` taps and the decay parameters.
 */
export type ParamKind = 'embedding' | 'norm' | 'linear' | 'router' | 'experts' | 'centred_norm' | 'conv' | 'gdn_a_log' | 'gdn_dt_bias';

export interface ParamSpec {
  name: string;
  shape: number[];
  kind: ParamKind;
  /** Decoder layer, for per-layer parameters. */
  layer?: number;
  /** Expert index, for per-expert parameters. */
  expert?: number;
}

/** A tensor on the host: raw little-endian bytes with their dtype and shape. */
export interface HostTensor {
  dtype: SafetensorsDType;
  shape: number[];
  data: Uint8Array;
}

const layerPrefix = (i: number) => `model.layers.${i}`;
export { fusedExpertNames, perExpertNames };

/** Every parameter of `cfg` in HF order (embedding, layers, final norm, LM head unless tied). */
export function paramSpecs(cfg: ModelConfig, opts: { expertLayout?: ExpertLayout } = {}): ParamSpec[] {
  const layout = opts.expertLayout ?? 'fused';
  if (isQwen35(cfg)) return qwen35ParamSpecs(cfg, layout);
  const { hiddenSize: H, headDim: D, numHeads: nH, numKvHeads: nKV } = cfg;
  const specs: ParamSpec[] = [{ name: 'model.embed_tokens.weight', shape: [cfg.vocabSize, H], kind: 'embedding' }];
  for (let i = 0; i < cfg.numLayers; i++) {
    const p = layerPrefix(i);
    const add = (name: string, shape: number[], kind: ParamKind, expert?: number) =>
      specs.push(expert === undefined ? { name, shape, kind, layer: i } : { name, shape, kind, layer: i, expert });
    add(`${p}.input_layernorm.weight`, [H], 'norm');
    add(`${p}.self_attn.q_proj.weight`, [nH * D, H], 'linear');
    add(`${p}.self_attn.k_proj.weight`, [nKV * D, H], 'linear');
    add(`${p}.self_attn.v_proj.weight`, [nKV * D, H], 'linear');
    add(`${p}.self_attn.o_proj.weight`, [H, nH * D], 'linear');
    add(`${p}.self_attn.q_norm.weight`, [D], 'norm');
    add(`${p}.self_attn.k_norm.weight`, [D], 'norm');
    add(`${p}.post_attention_layernorm.weight`, [H], 'norm');
    if (isMoeLayer(cfg, i)) {
      const { numExperts: E, intermediateSize: I } = cfg.moe!;
      add(`${p}.mlp.gate.weight`, [E, H], 'router');
      if (layout === 'fused') {
        const n = fusedExpertNames(i);
        add(n.gateUp, [E, 2 * I, H], 'experts');
        add(n.down, [E, H, I], 'experts');
      } else {
        for (let e = 0; e < E; e++) {
          const n = perExpertNames(i, e);
          add(n.gate, [I, H], 'experts', e);
          add(n.up, [I, H], 'experts', e);
          add(n.down, [H, I], 'experts', e);
        }
      }
    } else {
      const I = cfg.intermediateSize;
      add(`${p}.mlp.gate_proj.weight`, [I, H], 'linear');
      add(`${p}.mlp.up_proj.weight`, [I, H], 'linear');
      add(`${p}.mlp.down_proj.weight`, [H, I], 'linear');
    }
  }
  specs.push({ name: 'model.norm.weight', shape: [H], kind: 'norm' });
  if (!cfg.tieWordEmbeddings) specs.push({ name: 'lm_head.weight', shape: [cfg.vocabSize, H], kind: 'linear' });
  return specs;
}

function moeLayers(cfg: ModelConfig): number[] {
  return Array.from({ length: cfg.numLayers }, (_, i) => i).filter((i) => isMoeLayer(cfg, i));
}

function listSome(names: string[], max = 6): string {
  const shown = names
    .slice(0, max)
    .map((n) => JSON.stringify(n))
    .join(', ');
  return names.length > max ? `${shown} and ${names.length - max} more` : shown;
}

/**
 * Which expert layout a set of tensor names uses, or null when `cfg` has no MoE layer.
 * A mixed set, an incomplete set, or expert tensors the config does not have are errors naming
 * the tensors at fault.
 */
export function detectExpertLayout(names: Iterable<string>, cfg: ModelConfig): ExpertLayout | null {
  const have = new Set(names);
  const layers = moeLayers(cfg);
  const fused = new Set<string>();
  const per = new Set<string>();
  for (const i of layers) {
    const f = fusedExpertNames(i);
    fused.add(f.gateUp).add(f.down);
    for (let e = 0; e < cfg.moe!.numExperts; e++) {
      const n = perExpertNames(i, e);
      per.add(n.gate).add(n.up).add(n.down);
    }
  }
  const expertNames = [...have].filter((n) => /^model\.layers\.\d+\.mlp\.experts\./.test(n));
  const unexpected = expertNames.filter((n) => !fused.has(n) && !per.has(n));
  if (unexpected.length) {
    const E = cfg.moe?.numExperts;
    throw new CheckpointFormatError(
      `Unexpected expert tensors ${listSome(unexpected)}; the config has ${layers.length ? `MoE layers [${layers.join(', ')}] with experts 0..${E! - 1}` : 'no MoE layers'}.`,
      { tensor: unexpected[0] },
    );
  }
  if (!layers.length) return null;
  const foundFused = expertNames.filter((n) => fused.has(n));
  const foundPer = expertNames.filter((n) => per.has(n));
  if (foundFused.length && foundPer.length) {
    throw new CheckpointFormatError(
      `Mixed expert layouts: fused tensors (${listSome(foundFused, 2)}) and per-expert tensors (${listSome(foundPer, 2)}); expected one layout. HINT: convert with convertExpertLayout before saving.`,
      { tensor: foundPer[0] },
    );
  }
  if (!foundFused.length && !foundPer.length) {
    throw new CheckpointFormatError(
      `No expert tensors for MoE layers [${layers.join(', ')}]; expected ${JSON.stringify(fusedExpertNames(layers[0]).gateUp)} (fused) or ${JSON.stringify(perExpertNames(layers[0], 0).gate)} (per-expert) and the rest of that layout.`,
      {},
    );
  }
  const layout: ExpertLayout = foundFused.length ? 'fused' : 'per-expert';
  const missing = [...(layout === 'fused' ? fused : per)].filter((n) => !have.has(n));
  if (missing.length) {
    throw new CheckpointFormatError(
      `Incomplete ${layout} expert layout: ${missing.length} tensor${missing.length === 1 ? '' : 's'} missing: ${listSome(missing)}.`,
      { tensor: missing[0], missing },
    );
  }
  return layout;
}

function expectTensor(tensors: ReadonlyMap<string, HostTensor>, name: string, shape: number[], dtype?: SafetensorsDType): HostTensor {
  const t = tensors.get(name)!;
  if (t.shape.length !== shape.length || t.shape.some((d, k) => d !== shape[k])) {
    throw new CheckpointFormatError(`Tensor ${JSON.stringify(name)} has shape [${t.shape.join(', ')}]; expected [${shape.join(', ')}] for this config.`, {
      tensor: name,
    });
  }
  if (dtype !== undefined && t.dtype !== dtype) {
    throw new CheckpointFormatError(`Tensor ${JSON.stringify(name)} is ${t.dtype}; expected ${dtype} like the other experts of its layer.`, { tensor: name });
  }
  const want = numelOf(shape)! * safetensorsDTypeSize(t.dtype);
  if (t.data.length !== want) {
    throw new CheckpointFormatError(`Tensor ${JSON.stringify(name)} holds ${t.data.length} bytes; ${t.dtype} × [${shape.join(', ')}] needs ${want}.`, {
      tensor: name,
    });
  }
  return t;
}

/**
 * The same parameters with the experts in layout `to` (bytes copied, never reinterpreted;
 * any dtype). Non-expert tensors are passed through (same objects); the input is not changed.
 */
export function convertExpertLayout(tensors: ReadonlyMap<string, HostTensor>, cfg: ModelConfig, to: ExpertLayout): Map<string, HostTensor> {
  const from = detectExpertLayout(tensors.keys(), cfg);
  if (from === null || from === to) return new Map(tensors);
  const { numExperts: E, intermediateSize: I } = cfg.moe!;
  const H = cfg.hiddenSize;
  const replaced = new Map<number, Map<string, HostTensor>>();
  for (const layer of moeLayers(cfg)) {
    const out = new Map<string, HostTensor>();
    const f = fusedExpertNames(layer);
    if (from === 'fused') {
      const gu = expectTensor(tensors, f.gateUp, [E, 2 * I, H]);
      const dn = expectTensor(tensors, f.down, [E, H, I], gu.dtype);
      const block = I * H * safetensorsDTypeSize(gu.dtype); // bytes of one [I, H] or [H, I] matrix
      for (let e = 0; e < E; e++) {
        const n = perExpertNames(layer, e);
        out.set(n.gate, { dtype: gu.dtype, shape: [I, H], data: gu.data.slice(2 * e * block, (2 * e + 1) * block) });
        out.set(n.up, { dtype: gu.dtype, shape: [I, H], data: gu.data.slice((2 * e + 1) * block, (2 * e + 2) * block) });
        out.set(n.down, { dtype: dn.dtype, shape: [H, I], data: dn.data.slice(e * block, (e + 1) * block) });
      }
    } else {
      const dtype = tensors.get(perExpertNames(layer, 0).gate)!.dtype;
      const block = I * H * safetensorsDTypeSize(dtype);
      const gateUp = new Uint8Array(E * 2 * block);
      const down = new Uint8Array(E * block);
      for (let e = 0; e < E; e++) {
        const n = perExpertNames(layer, e);
        gateUp.set(expectTensor(tensors, n.gate, [I, H], dtype).data, 2 * e * block);
        gateUp.set(expectTensor(tensors, n.up, [I, H], dtype).data, (2 * e + 1) * block);
        down.set(expectTensor(tensors, n.down, [H, I], dtype).data, e * block);
      }
      out.set(f.gateUp, { dtype, shape: [E, 2 * I, H], data: gateUp });
      out.set(f.down, { dtype, shape: [E, H, I], data: down });
    }
    replaced.set(layer, out);
  }
  // Keep HF order: each layer's new expert tensors go where its old ones were.
  const result = new Map<string, HostTensor>();
  for (const [name, t] of tensors) {
    const m = /^model\.layers\.(\d+)\.mlp\.experts\./.exec(name);
    if (!m) {
      result.set(name, t);
      continue;
    }
    const out = replaced.get(Number(m[1]));
    if (out && !result.has(out.keys().next().value!)) for (const [n, v] of out) result.set(n, v);
  }
  return result;
}

/**
 * Deterministic parameters for `cfg`: normal(0, 0.02) for matrices (embedding, linears,
 * router, experts), ones for norms, as Float32Array. Each tensor's values depend only on
 * (seed, name), and each expert's only on (seed, per-expert name), so the fused and
 * per-expert layouts hold the same numbers.
 */
export function initParams(cfg: ModelConfig, seed: number, opts: { expertLayout?: ExpertLayout } = {}): Map<string, { shape: number[]; data: Float32Array }> {
  const out = new Map<string, { shape: number[]; data: Float32Array }>();
  const base = mixSeed(seed);
  for (const spec of paramSpecs(cfg, { expertLayout: 'per-expert' })) {
    const data = new Float32Array(numelOf(spec.shape)!);
    const rng = new Prng(base ^ hashString(spec.name));
    if (spec.kind === 'norm' || spec.kind === 'gdn_dt_bias') data.fill(1);
    else if (spec.kind === 'centred_norm') data.fill(0);
    // HF Qwen3.5: A = uniform(0.01, 16), stored as log(A).
    else if (spec.kind === 'gdn_a_log') for (let k = 0; k < data.length; k++) data[k] = Math.log(0.01 + 15.99 * rng.next());
    // Depthwise conv taps: fan-in is the kernel width, so unit-variance-preserving taps are 1/sqrt(K).
    else if (spec.kind === 'conv') for (let k = 0; k < data.length; k++) data[k] = rng.normal() / Math.sqrt(spec.shape[spec.shape.length - 1]!);
    else for (let k = 0; k < data.length; k++) data[k] = 0.02 * rng.normal();
    out.set(spec.name, { shape: spec.shape, data });
  }
  if ((opts.expertLayout ?? 'fused') === 'per-expert') return out;
  const fused = convertExpertLayout(toHostTensors(out), cfg, 'fused');
  return new Map([...fused].map(([n, t]) => [n, { shape: t.shape, data: new Float32Array(t.data.buffer, t.data.byteOffset, t.data.length / 4) }]));
}

/** F32 host tensors viewing the same memory as `params` (no copy). */
/** The inverse of toHostTensors for F32 tensors (copied into aligned Float32Arrays). */
export function fromHostTensors(tensors: ReadonlyMap<string, HostTensor>): Map<string, { shape: number[]; data: Float32Array }> {
  return new Map(
    [...tensors].map(([n, t]) => {
      if (t.dtype !== 'F32') throw new CheckpointFormatError(`${n} is ${t.dtype}; expected F32.`, { tensor: n });
      const data = new Float32Array(t.data.byteLength / 4);
      new Uint8Array(data.buffer).set(t.data);
      return [n, { shape: [...t.shape], data }];
    }),
  );
}

/** Full HF-named fp32 parameters in the fused expert layout (converted when they are per-expert). */
/** Seeded initial parameters in the fused expert layout, as fp32 host arrays. */
export function initialParams(cfg: ModelConfig, seed: number): Map<string, { shape: number[]; data: Float32Array }> {
  return toFusedParams(initParams(cfg, seed), cfg);
}

export function toFusedParams(
  params: ReadonlyMap<string, { shape: readonly number[]; data: Float32Array }>,
  cfg: ModelConfig,
): Map<string, { shape: number[]; data: Float32Array }> {
  if (isQwen35(cfg)) params = textOnlyWeights(params, undefined, cfg.modelType);
  if (!cfg.moe || detectExpertLayout(params.keys(), cfg) !== 'per-expert')
    return new Map([...params].map(([n, p]) => [n, { shape: [...p.shape], data: p.data }]));
  return fromHostTensors(convertExpertLayout(toHostTensors(params), cfg, 'fused'));
}

export function toHostTensors(params: ReadonlyMap<string, { shape: readonly number[]; data: Float32Array }>): Map<string, HostTensor> {
  return new Map(
    [...params].map(([n, p]) => [n, { dtype: 'F32' as const, shape: [...p.shape], data: new Uint8Array(p.data.buffer, p.data.byteOffset, p.data.byteLength) }]),
  );
}

/**
 * Checks that a checkpoint's tensors (names and shapes) are exactly the parameters of `cfg`
 * in one expert layout; returns that layout (null for no MoE layer). Every missing,
 * unexpected or misshapen tensor is listed in one CheckpointFormatError. A tied model may
 * also carry `lm_head.weight` (some exporters write it). A tensor that says which `file` holds
 * it is named with that file.
 */
export function checkParamsAgainstConfig(tensors: Iterable<{ name: string; shape: readonly number[]; file?: string }>, cfg: ModelConfig): ExpertLayout | null {
  let list = [...tensors];
  if (isQwen35(cfg)) list = [...textOnlyWeights(new Map(list.map((t) => [t.name, t])), () => {}).entries()].map(([name, t]) => ({ ...t, name }));
  const layout = detectExpertLayout(
    list.map((t) => t.name),
    cfg,
  );
  const specs = new Map(paramSpecs(cfg, { expertLayout: layout ?? 'fused' }).map((s) => [s.name, s.shape]));
  if (cfg.tieWordEmbeddings && list.some((t) => t.name === 'lm_head.weight')) specs.set('lm_head.weight', [cfg.vocabSize, cfg.hiddenSize]);
  const seen = new Set<string>();
  const problems: string[] = [];
  const unexpected: string[] = [];
  for (const t of list) {
    seen.add(t.name);
    const want = specs.get(t.name);
    if (!want) unexpected.push(t.name);
    else if (want.length !== t.shape.length || want.some((d, k) => d !== t.shape[k])) {
      problems.push(`${JSON.stringify(t.name)}${t.file ? ` (in ${t.file})` : ''} has shape [${t.shape.join(', ')}], expected [${want.join(', ')}]`);
    }
  }
  const missing = [...specs.keys()].filter((n) => !seen.has(n));
  if (missing.length) problems.unshift(`missing ${listSome(missing)}`);
  if (unexpected.length) problems.push(`unexpected ${listSome(unexpected)}`);
  if (problems.length) {
    throw new CheckpointFormatError(`Checkpoint does not match the ${cfg.modelType} config: ${problems.join('; ')}.`, { missing, unexpected });
  }
  return layout;
}
