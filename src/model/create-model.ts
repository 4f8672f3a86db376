/**
 * The one place a model class is chosen from the config: Qwen3 / Qwen3-MoE run Qwen3Model,
 * Qwen3.5 and Qwen3.5-MoE run Qwen35Model. Both read parameters by HF name and return logits [B·S, V].
 */
import type { Var, Tape } from './autograd.js';
import { isQwen35, type ModelConfig } from './config.js';
import type { ParamStore } from './param-store.js';
import { Qwen3Model, type Batch, type ParamSource, type ProjectionHooks } from './qwen3.js';
import { Qwen35Model } from './qwen3_5.js';

/** What a strategy needs of a model: the forward on a tape. */
export interface CausalLM {
  readonly cfg: ModelConfig;
  forward(tape: Tape, batch: Batch): Var;
}

export function createModel(cfg: ModelConfig, params: ParamStore | ParamSource, hooks: ProjectionHooks = {}): CausalLM {
  return isQwen35(cfg) ? new Qwen35Model(cfg, params, hooks) : new Qwen3Model(cfg, params, hooks);
}
