/**
 * FSDP2 shard layout (host-side arithmetic only, no device work).
 *
 * Every parameter is sharded on dim 0 over the `dp` ranks with torch.chunk semantics
 * (ceil-sized chunks; trailing chunks smaller or EMPTY), each chunk padded to the
 * ceil size so every rank holds the same number of elements. The parameters of one
 * FSDP unit (the embedding, one decoder layer, the final norm + LM head) are packed
 * into one flat per-rank shard:
 *
 *   shard (this rank, S elements)  = [p0 chunk r | p1 chunk r | ...], each padded to c_p
 *   all-gathered (dp·S, rank-major) = [rank 0 shard | rank 1 shard | ...]
 *   unsharded (dp·S, param-major)   = [p0 padded full (dp·c_p) | p1 padded full | ...]
 *
 * so one all-gather (and one reduce-scatter) per unit moves equal-sized pieces, and
 * each parameter's full tensor is the first d0 rows of its padded-full region.
 *
 * A bf16 trainer (mixed-precision.ts) puts each unit's bf16-compute parameters (matmul weights)
 * first: the shard's first `lowNumel` elements are cast to bf16 and all-gathered as bf16 (half
 * the bytes), the rest (norms, router) all-gathered in fp32 (unit-comm.ts). The fp32 shard
 * itself (the master) is laid out the same way either precision would read it.
 *
 * With LoRA, each decoder layer's adapters (PEFT names) form their own unit
 * `lora.layer.N`, gathered with the layer; only those units are trainable (the base
 * units are frozen: no gradient buffers, no reduce-scatter, no AdamW moments).
 */
import { InvalidArgumentError } from '../../runtime/errors.js';
import type { ModelConfig } from '../../model/config.js';
import type { HostParam } from '../../model/param-store.js';
import type { LoraParamSpec } from '../../model/lora.js';
import { paramSpecs } from '../../model/params.js';
import type { ModelBlock } from '../../model/qwen3.js';
import { chunkRange, chunkSize } from '../../parallel/placement.js';
import type { HostShard } from '../../parallel/sharded-load.js';

export interface FlatParam {
  name: string;
  shape: readonly number[];
  /** Elements of one dim-0 row (1 for a vector). */
  rowNumel: number;
  /** ceil(d0 / dp): rows every rank's (padded) chunk holds. */
  chunkRows: number;
  /** chunkRows · rowNumel: elements of one padded chunk. */
  chunk: number;
  /** Element offset of this parameter's chunk inside a rank's flat shard. */
  offset: number;
}

export interface FlatUnit {
  /** 'embed', 'layer.N', 'head' or (LoRA adapters) 'lora.layer.N'. */
  key: string;
  /** Its parameters get gradients and AdamW (false: frozen LoRA base). */
  trainable: boolean;
  params: FlatParam[];
  /** Elements of one rank's flat shard (sum of padded chunks). */
  shardNumel: number;
  /** Leading elements of the shard gathered as bf16 (the bf16-compute parameters' chunks); 0 or absent in fp32. */
  lowNumel?: number;
}

export interface FlatLayout {
  dp: number;
  units: FlatUnit[];
  /** Unit of each parameter name. */
  unitOf: Map<string, FlatUnit>;
  /** Largest dp·S over the units (size of one gather slot). */
  maxGatheredNumel: number;
}

const numel = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);

function unitKeyOf(name: string): string {
  const m = /^model\.layers\.(\d+)\./.exec(name);
  if (m) return `layer.${m[1]}`;
  return name === 'model.embed_tokens.weight' ? 'embed' : 'head';
}

/**
 * The flat-shard layout of `cfg`'s parameters (HF names, fused experts) over `dp` ranks;
 * with `lora` (adapter specs), the adapters in per-layer units and the base frozen; with
 * `bf16` (the names a bf16 trainer computes with in bf16), those first in each unit.
 */
export function planLayout(cfg: ModelConfig, dp: number, lora?: readonly LoraParamSpec[], bf16?: ReadonlySet<string>): FlatLayout {
  const units = new Map<string, FlatUnit>();
  const unitOf = new Map<string, FlatUnit>();
  const low = (name: string) => bf16?.has(name) ?? false;
  const specs = [
    ...paramSpecs(cfg, { expertLayout: 'fused' }).map((s) => ({ name: s.name, shape: s.shape, key: unitKeyOf(s.name), trainable: !lora })),
    ...(lora ?? []).map((s) => ({ name: s.name, shape: s.shape, key: `lora.layer.${s.layer}`, trainable: true })),
  ];
  // Units in first-use order; inside each, the bf16 parameters first (model order within each precision).
  const keys = [...new Set(specs.map((s) => s.key))];
  const ordered = keys.flatMap((k) => [true, false].flatMap((l) => specs.filter((s) => s.key === k && low(s.name) === l)));
  for (const spec of ordered) {
    const key = spec.key;
    let u = units.get(key);
    if (!u) units.set(key, (u = { key, trainable: spec.trainable, params: [], shardNumel: 0, lowNumel: 0 }));
    const rowNumel = numel(spec.shape.slice(1));
    const chunkRows = chunkSize(spec.shape[0]!, dp);
    const p: FlatParam = { name: spec.name, shape: spec.shape, rowNumel, chunkRows, chunk: chunkRows * rowNumel, offset: u.shardNumel };
    u.params.push(p);
    u.shardNumel += p.chunk;
    if (low(spec.name)) u.lowNumel = (u.lowNumel ?? 0) + p.chunk;
    unitOf.set(spec.name, u);
  }
  // Each layer's adapter unit right after the layer (forward order).
  const list = [...units.values()]
    .filter((u) => !u.key.startsWith('lora.'))
    .flatMap((u) => [u, ...(units.has(`lora.${u.key}`) ? [units.get(`lora.${u.key}`)!] : [])]);
  return { dp, units: list, unitOf, maxGatheredNumel: Math.max(...list.map((u) => dp * u.shardNumel)) };
}

/** The units a model block needs gathered: its own, plus the embedding for a tied LM head. */
export function blockUnits(layout: FlatLayout, cfg: ModelConfig, block: ModelBlock): FlatUnit[] {
  const byKey = (k: string) => layout.units.find((u) => u.key === k)!;
  switch (block.kind) {
    case 'embed':
      return [byKey('embed')];
    case 'layer': {
      const adapters = layout.units.find((u) => u.key === `lora.layer.${block.index}`);
      return adapters ? [byKey(`layer.${block.index}`), adapters] : [byKey(`layer.${block.index}`)];
    }
    case 'head':
      return cfg.tieWordEmbeddings ? [byKey('head'), byKey('embed')] : [byKey('head')];
  }
}

/**
 * Checks full host parameters against the config: every name present, none extra,
 * every shape right. Returns the problems (empty when fine), each naming the parameter.
 */
/**
 * What is wrong with `host` for `layout`: missing, unexpected or misshapen parameters. A
 * HostShard (this rank's piece, from loadShardedHost) must be the Shard(0) piece of rank
 * `rank` of `dp` (torch.chunk rows), the piece shardFromHost() takes.
 */
export function paramProblems(layout: FlatLayout, host: ReadonlyMap<string, HostParam | HostShard>, dp = 1, rank = 0, what = 'parameter'): string[] {
  const problems: string[] = [];
  const missing = [...layout.unitOf.keys()].filter((n) => !host.has(n));
  const extra = [...host.keys()].filter((n) => !layout.unitOf.has(n));
  const list = (xs: string[]) => xs.slice(0, 5).join(', ') + (xs.length > 5 ? `, … (${xs.length} in all)` : '');
  if (missing.length) problems.push(`missing ${what}s [${list(missing)}]`);
  if (extra.length) problems.push(`unexpected ${what}s [${list(extra)}]`);
  for (const u of layout.units) {
    for (const p of u.params) {
      const h = host.get(p.name);
      if (!h) continue;
      if (h.shape.length !== p.shape.length || h.shape.some((d, i) => d !== p.shape[i])) {
        problems.push(`${what} ${p.name} has shape [${h.shape.join(', ')}] but the config needs [${p.shape.join(', ')}]`);
      } else if (isHostShard(h)) {
        const [r0, r1] = chunkRange(p.shape[0]!, dp, rank);
        const rows = h.box.offset.every((o, d) => (d === 0 ? o === r0 : o === 0)) && h.box.shape.every((n, d) => (d === 0 ? n === r1 - r0 : n === p.shape[d]));
        if (!rows || h.data.length !== (r1 - r0) * p.rowNumel) {
          problems.push(
            `${what} ${p.name}: this rank's piece covers offset [${h.box.offset.join(', ')}] shape [${h.box.shape.join(', ')}] but rank ${rank} of ${dp} owns rows [${r0}, ${r1}) (Shard(0))`,
          );
        }
      } else if (!(h.data instanceof Float32Array) || h.data.length !== numel(p.shape)) {
        problems.push(`${what} ${p.name} must hold a Float32Array of ${numel(p.shape)} elements (got ${h.data?.length})`);
      }
    }
  }
  return problems;
}

export function throwProblems(problems: string[], context: string): void {
  if (!problems.length) return;
  throw new InvalidArgumentError(
    `${context}: ${problems.join('; ')}. HINT: pass every parameter of the config by HF name, experts in the fused layout (convertExpertLayout(..., 'fused')).`,
    { problems },
  );
}

/**
 * This rank's flat shard of `unit` from full host tensors or from this rank's Shard(0)
 * pieces (checked by paramProblems); zero padding, a missing tensor leaves zeros.
 */
export function shardFromHost(unit: FlatUnit, dp: number, rank: number, host: ReadonlyMap<string, HostParam | HostShard>): Float32Array {
  const out = new Float32Array(unit.shardNumel);
  for (const p of unit.params) {
    const h = host.get(p.name);
    if (!h) continue;
    const [r0, r1] = chunkRange(p.shape[0]!, dp, rank);
    out.set(isHostShard(h) ? h.data : h.data.subarray(r0 * p.rowNumel, r1 * p.rowNumel), p.offset);
  }
  return out;
}

function isHostShard(h: HostParam | HostShard): h is HostShard {
  return 'box' in h;
}

/** Full host tensors of `unit` from its all-gathered (rank-major, dp·S) flat data. */
export function hostFromGathered(unit: FlatUnit, dp: number, gathered: Float32Array, out: Map<string, HostParam>): void {
  for (const p of unit.params) {
    const full = new Float32Array(numel(p.shape));
    for (let r = 0; r < dp; r++) {
      const [r0, r1] = chunkRange(p.shape[0]!, dp, r);
      const src = r * unit.shardNumel + p.offset;
      full.set(gathered.subarray(src, src + (r1 - r0) * p.rowNumel), r0 * p.rowNumel);
    }
    out.set(p.name, { shape: [...p.shape], data: full });
  }
}
