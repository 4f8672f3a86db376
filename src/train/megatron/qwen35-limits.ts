/**
 * What the megatron strategy does not run, refused before any collective or checkpoint read
 * with one ConfigError naming the limit (every rank throws alike):
 * - context parallelism (cp > 1): megatron here splits tokens over no ranks, for any model; and
 *   for Qwen3.5 (`qwen3_5`, `qwen3_5_moe`) it would have nothing to split the Gated DeltaNet layers
 *   with: as in the reference Megatron fallback, a GDN layer has no tensor- or context-parallel
 *   split (its recurrence runs over the whole sequence), so under tp > 1 each TP rank runs every
 *   GDN layer whole (replicated) while full attention and the MLP / experts split as Qwen3's.
 * Qwen3.5 otherwise trains at any tp / dp / ep the layout checks accept (layout.ts).
 */
import { ConfigError } from '../../runtime/errors.js';
import { isQwen35, type ModelConfig } from '../../model/config.js';

/** Throws for cp other than 1 (`where` names the call, e.g. 'MegatronStrategy.create()'). */
export function refuseContextParallel(cfg: ModelConfig, cp: unknown, where: string): void {
  if (cp === undefined || cp === 1) return;
  const why = isQwen35(cfg)
    ? `; ${cfg.modelType}'s Gated DeltaNet layers (linear_attn) have no context-parallel (nor tensor-parallel) split, as in the reference Megatron fallback`
    : '';
  throw new ConfigError(
    `${where}: megatron has no context parallelism in this build (cp=${JSON.stringify(cp)})${why}. HINT: use cp=1 and scale with dp (or tp: full attention and the MLP / experts split over tp${isQwen35(cfg) ? ', GDN layers run whole on every TP rank' : ''}).`,
    { modelType: cfg.modelType, cp, where },
  );
}
