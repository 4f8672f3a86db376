/**
 * What the megatron strategy does not run for Qwen3.5 (`qwen3_5`, `qwen3_5_moe`), refused
 * before any collective or checkpoint read with one ConfigError naming the limit:
 * - tp > 1: the Gated DeltaNet layers (linear_attn: in_proj_qkv, the depthwise conv, the gated
 *   delta rule, the gated norm) have no tensor-parallel split here, nor a context-parallel one,
 *   as in the reference Megatron fallback; that limit holds whatever else is added.
 * - tp = 1 (dp, ep): megatron's model and Megatron-name bridge (model.ts, bridge.ts) are the
 *   Qwen3 decoder's; they have no GDN layer, gated attention or shared expert yet.
 * fsdp2 trains both Qwen3.5 models over data-parallel ranks, so every message points there.
 */
import { ConfigError } from '../../runtime/errors.js';
import { isQwen35, type ModelConfig } from '../../model/config.js';

/** Throws for a Qwen3.5 `cfg` (`where` names the call, e.g. 'MegatronStrategy.create()'); other models pass. */
export function refuseQwen35OnMegatron(cfg: ModelConfig, tp: unknown, where: string): void {
  if (!isQwen35(cfg)) return;
  const hint = `HINT: train ${cfg.modelType} with strategy 'fsdp2' (data parallel over every rank, tp=1, ep=1) or 'single'.`;
  if (typeof tp === 'number' && tp > 1) {
    throw new ConfigError(
      `${where}: ${cfg.modelType} does not support tensor parallelism (tp=${tp}): its Gated DeltaNet layers (linear_attn) have no tensor-parallel or context-parallel split in this build. ${hint}`,
      { modelType: cfg.modelType, tp, where },
    );
  }
  throw new ConfigError(
    `${where}: megatron does not run ${cfg.modelType} in this build, at any tp / dp / ep: its model and Megatron-name bridge cover the Qwen3 decoder only (no Gated DeltaNet layer, gated attention${cfg.moe ? ' or shared expert' : ''}). ${hint}`,
    { modelType: cfg.modelType, tp: tp ?? 1, where },
  );
}
