/**
 * How LoRA adapters (HF-PEFT names, see model/lora.ts) are split over a megatron
 * rank's tensor- and expert-parallel groups, and the host-side slicing / gathering of
 * each adapter. Adapters keep their PEFT names: q/k/v adapters stay separate (not
 * fused into a linear_qkv adapter) and are applied to this TP rank's heads of the
 * split q/k/v outputs (lora-hook.ts), gate/up likewise to the gate and up halves of
 * this rank's linear_fc1 output.
 *
 * - column-parallel bases (q, k, v, gate, up): lora_A [r, in] replicated over tp, its
 *   gradient PARTIAL per TP rank (each rank only back-propagates its output rows), so
 *   summed over tp; lora_B [out, r] split on rows like the base weight (contiguous:
 *   a TP rank owns a contiguous run of heads / of the intermediate features).
 * - row-parallel bases (o, down): lora_A [r, in] split on its input columns like the
 *   base; lora_B [out, r] replicated, gradient PARTIAL (each rank's x_local·A_localᵀ is
 *   a partial sum, completed by the same all-reduce as the base output), so summed
 *   over tp.
 * - Gated DeltaNet projections (replicated bases): A and B replicated, gradients complete.
 * - the shared expert's gate / up (column) and down (row) as the dense MLP's.
 * - fused experts: lora_A [E, r, in] / lora_B [E, out, r] split by expert over ep
 *   exactly like the experts (replicated over tp; gradients complete per rank).
 */
import { InvalidArgumentError, InternalError } from '../../runtime/errors.js';
import type { HostParam } from '../../model/param-store.js';
import type { LoraParamSpec } from '../../model/lora.js';
import { tpGather, tpSlice, type TpSplit } from './bridge.js';

export type LoraSplit = 'replicated' | 'rows' | 'cols' | 'experts';

export interface LoraShardSpec extends LoraParamSpec {
  split: LoraSplit;
  /** Gradient is a partial sum per TP rank (needs an all-reduce over tp). */
  partialOverTp: boolean;
}

const COLUMN_BASE = /\.(self_attn\.[qkv]_proj|mlp\.(shared_expert\.)?(gate|up)_proj)\.weight$/;
const ROW_BASE = /\.(self_attn\.o_proj|mlp\.(shared_expert\.)?down_proj)\.weight$/;
/** Gated DeltaNet projections: their base is whole on every TP rank (no GDN TP split), so are A and B. */
const REPLICATED_BASE = /\.linear_attn\.(in_proj_qkv|in_proj_z|in_proj_b|in_proj_a|out_proj)\.weight$/;

/** The split of every adapter parameter. */
export function loraShardSpecs(specs: readonly LoraParamSpec[]): LoraShardSpec[] {
  return specs.map((s) => {
    if (s.kind === 'experts') return { ...s, split: 'experts', partialOverTp: false };
    if (REPLICATED_BASE.test(s.base)) return { ...s, split: 'replicated', partialOverTp: false };
    const column = COLUMN_BASE.test(s.base);
    if (!column && !ROW_BASE.test(s.base)) throw new InternalError(`megatron LoRA: no TP split known for ${s.base}`);
    if (column) return s.role === 'A' ? { ...s, split: 'replicated', partialOverTp: true } : { ...s, split: 'rows', partialOverTp: false };
    return s.role === 'A' ? { ...s, split: 'cols', partialOverTp: false } : { ...s, split: 'replicated', partialOverTp: true };
  });
}

/** The bridge's TP split with the same slicing (rows ≙ column parallel, cols ≙ row parallel). */
const asTp = (split: LoraSplit): TpSplit => (split === 'rows' ? 'column' : split === 'cols' ? 'row' : 'replicated');

function checkDivisible(spec: LoraShardSpec, n: number, what: string): void {
  const dim = spec.split === 'cols' ? spec.shape[1]! : spec.shape[0]!;
  if (dim % n !== 0) {
    throw new InvalidArgumentError(
      `megatron LoRA: ${spec.name} [${spec.shape.join(', ')}] does not split over ${what}=${n}. HINT: use a ${what} that divides ${dim}.`,
      { name: spec.name },
    );
  }
}

/** The local shape of an adapter on a rank of `tp` TP ranks and `ep` EP ranks. */
export function loraLocalShape(spec: LoraShardSpec, tp: number, ep: number): number[] {
  const [a, b, c] = spec.shape;
  switch (spec.split) {
    case 'replicated':
      return [...spec.shape];
    case 'rows':
      return [a! / tp, b!];
    case 'cols':
      return [a!, b! / tp];
    case 'experts':
      return [a! / ep, b!, c!];
  }
}

/** This rank's shard of a full adapter (a copy); `epIndex` is the rank's expert-parallel coordinate. */
export function loraSlice(spec: LoraShardSpec, full: HostParam, tp: number, tpRank: number, ep: number, epIndex: number): Float32Array {
  if (spec.split === 'experts') {
    checkDivisible(spec, ep, 'ep');
    const n = full.data.length / ep;
    return full.data.slice(epIndex * n, (epIndex + 1) * n);
  }
  if (spec.split !== 'replicated') checkDivisible(spec, tp, 'tp');
  return tpSlice({ name: spec.name, shape: spec.shape, tp: asTp(spec.split) }, full, tp, tpRank).data;
}

/**
 * The full adapter from the all-gathered shards: `all` holds the shards of every rank
 * of the group it is split over (tp for rows / cols, ep for experts) in rank order.
 */
export function loraGather(spec: LoraShardSpec, all: Float32Array, groupSize: number): HostParam {
  if (spec.split === 'experts' || spec.split === 'replicated')
    return {
      shape: [...spec.shape],
      data: all.slice(
        0,
        spec.shape.reduce((x, y) => x * y, 1),
      ),
    };
  const n = all.length / groupSize;
  const local = loraLocalShape(spec, groupSize, 1);
  const shards = Array.from({ length: groupSize }, (_, q) => ({ shape: local, data: all.subarray(q * n, (q + 1) * n) }));
  return tpGather({ name: spec.name, shape: spec.shape, tp: asTp(spec.split) }, shards);
}
