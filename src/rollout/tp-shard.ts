/**
 * Tensor-parallel arithmetic of the rollout engine: which query heads, kv heads and
 * intermediate columns one TP rank owns. Column-parallel projections (q/k/v, gate/up,
 * expert w13) keep the rank's output rows; row-parallel ones (o_proj, down, expert w2)
 * keep the matching input columns and are summed over `tp` by an all-reduce.
 *
 * KV heads: with tp <= numKvHeads each rank owns numKvHeads / tp of them; with
 * tp > numKvHeads each kv head is replicated on tp / numKvHeads ranks (as vLLM does),
 * so every rank owns exactly one. Query head h uses kv head h / (numHeads / numKvHeads)
 * either way, so the local grouped attention is the global one restricted to the rank.
 * Embedding, norms, router and LM head are replicated.
 *
 * Qwen3.5 (dense and MoE): a Gated DeltaNet layer splits by heads — rank r owns key heads
 * and value heads r·Hk/tp .. and r·Hv/tp .. (value head j reads key head j / (Hv / Hk),
 * so a rank's value heads read only its own key heads), with their conv channels and
 * recurrent state; out_proj is row parallel. Its gated full attention splits as Qwen3's
 * (each head's query and output gate together), and the MoE shared expert as a dense MLP.
 * A tp that does not divide Hk, Hv or the shared expert's width is a ConfigError.
 */
import { ConfigError, InvalidArgumentError } from '../runtime/errors.js';
import { isQwen35, type ModelConfig } from '../model/config.js';

export interface TpShard {
  tpSize: number;
  tpRank: number;
  /** Local query heads and the first global one. */
  headsLocal: number;
  headStart: number;
  /** Local kv heads and the first global one. */
  kvHeadsLocal: number;
  kvHeadStart: number;
  /** Dense MLP intermediate columns per rank and the first one. */
  interLocal: number;
  interStart: number;
  /** MoE per-expert intermediate columns per rank and the first one (0 without MoE). */
  moeInterLocal: number;
  moeInterStart: number;
  /** Qwen3.5 GDN key / value heads per rank and the first ones (0 without GDN). */
  gdnKeyHeadsLocal: number;
  gdnKeyHeadStart: number;
  gdnValueHeadsLocal: number;
  gdnValueHeadStart: number;
  /** Qwen3.5-MoE shared-expert intermediate columns per rank and the first one (0 without one). */
  sharedInterLocal: number;
  sharedInterStart: number;
}

/** Qwen3.5 sizes the tp must divide: a split that does not divide is no head- or column-aligned shard. */
function checkQwen35(cfg: ModelConfig, tp: number): void {
  const lin = cfg.qwen35!.linear;
  const sizes: Array<[string, number]> = [
    ['linear_num_key_heads', lin.numKeyHeads],
    ['linear_num_value_heads', lin.numValueHeads],
  ];
  if (cfg.moe?.sharedExpertIntermediateSize !== undefined) sizes.push(['shared_expert_intermediate_size', cfg.moe.sharedExpertIntermediateSize]);
  const bad = sizes.filter(([, n]) => n % tp !== 0);
  if (bad.length) {
    throw new ConfigError(
      `The rollout engine cannot run ${cfg.modelType} at tensor parallel size ${tp}: it splits the Gated DeltaNet layers by heads (and the shared expert by columns), but tp ${tp} does not divide ${bad.map(([k, n]) => `${k} (${n})`).join(' or ')}. HINT: use a tp size that divides ${bad.map(([k]) => k).join(' and ')} (tp 1 always works).`,
      { modelType: cfg.modelType, tpSize: tp, ...Object.fromEntries(bad) },
    );
  }
}

function divisible(what: string, size: number, tp: number): void {
  if (size % tp !== 0) {
    throw new InvalidArgumentError(
      `Tensor parallel size ${tp} does not divide ${what} (${size}). HINT: use a tp size that divides ${what} (1, 2 or 4 for the tiny models).`,
      { argument: 'tpSize', tpSize: tp, [what]: size },
    );
  }
}

/** The shard of rank `tpRank` in a tp group of `tpSize`; sizes the model cannot split are errors. */
export function tpShard(cfg: ModelConfig, tpSize: number, tpRank: number): TpShard {
  if (!Number.isInteger(tpSize) || tpSize < 1)
    throw new InvalidArgumentError(`Expected a positive integer for tpSize but received ${tpSize}.`, { argument: 'tpSize' });
  if (!Number.isInteger(tpRank) || tpRank < 0 || tpRank >= tpSize) {
    throw new InvalidArgumentError(`Expected tpRank in [0, ${tpSize}) but received ${tpRank}.`, { argument: 'tpRank' });
  }
  if (isQwen35(cfg)) checkQwen35(cfg, tpSize);
  divisible('num_attention_heads', cfg.numHeads, tpSize);
  divisible('intermediate_size', cfg.intermediateSize, tpSize);
  if (cfg.moe) divisible('moe_intermediate_size', cfg.moe.intermediateSize, tpSize);
  const nKV = cfg.numKvHeads;
  if (nKV % tpSize !== 0 && tpSize % nKV !== 0) {
    throw new InvalidArgumentError(
      `Tensor parallel size ${tpSize} and num_key_value_heads ${nKV}: one must divide the other (kv heads are split, or replicated when tp > kv heads).`,
      { argument: 'tpSize', tpSize, numKvHeads: nKV },
    );
  }
  const headsLocal = cfg.numHeads / tpSize;
  const kvHeadsLocal = tpSize <= nKV ? nKV / tpSize : 1;
  const kvHeadStart = tpSize <= nKV ? tpRank * kvHeadsLocal : Math.floor(tpRank / (tpSize / nKV));
  const interLocal = cfg.intermediateSize / tpSize;
  const moeInterLocal = cfg.moe ? cfg.moe.intermediateSize / tpSize : 0;
  const lin = cfg.qwen35?.linear;
  const hk = lin ? lin.numKeyHeads / tpSize : 0,
    hv = lin ? lin.numValueHeads / tpSize : 0;
  const shared = (cfg.qwen35 && cfg.moe?.sharedExpertIntermediateSize) || 0;
  return {
    tpSize,
    tpRank,
    headsLocal,
    headStart: tpRank * headsLocal,
    kvHeadsLocal,
    kvHeadStart,
    interLocal,
    interStart: tpRank * interLocal,
    moeInterLocal,
    moeInterStart: tpRank * moeInterLocal,
    gdnKeyHeadsLocal: hk,
    gdnKeyHeadStart: tpRank * hk,
    gdnValueHeadsLocal: hv,
    gdnValueHeadStart: tpRank * hv,
    sharedInterLocal: shared / tpSize,
    sharedInterStart: (tpRank * shared) / tpSize,
  };
}
