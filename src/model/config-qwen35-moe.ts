/**
 * The MoE fields of a Qwen3.5-MoE (`qwen3_5_moe`) text config. Transformers' Qwen3_5MoeTextConfig
 * puts the sparse block (router `mlp.gate`, `num_experts` routed experts of `moe_intermediate_size`,
 * one shared expert of `shared_expert_intermediate_size` scaled by sigmoid(`shared_expert_gate`))
 * in every decoder layer and always renormalises the top-k router probabilities: it has no
 * dense MLP, so it drops `intermediate_size`, `decoder_sparse_step`, `norm_topk_prob` and
 * `mlp_only_layers`. A config that sets one of them to anything but that behaviour is refused
 * rather than trained as something the checkpoint was not.
 */
import type { MoeConfig } from './config.js';
import { parseRouterAuxLoss } from './router-aux-config.js';

type Fail = (msg: string, details?: Record<string, unknown>) => never;

const posInt = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v > 0;

/** The MoeConfig of a flat qwen3_5_moe text config `t`. */
export function parseQwen35Moe(t: Record<string, unknown>, fail: Fail): MoeConfig {
  const sizes: Record<string, number> = {};
  for (const key of ['num_experts', 'num_experts_per_tok', 'moe_intermediate_size', 'shared_expert_intermediate_size']) {
    const v = t[key];
    if (!posInt(v)) fail(`field "${key}" is ${v === undefined ? 'missing' : JSON.stringify(v)}; expected a positive integer for qwen3_5_moe.`, { field: key });
    sizes[key] = v as number;
  }
  if (sizes.num_experts_per_tok! > sizes.num_experts!) {
    fail(`num_experts_per_tok (${sizes.num_experts_per_tok}) is greater than num_experts (${sizes.num_experts}); expected at most num_experts.`, {
      field: 'num_experts_per_tok',
    });
  }
  const refuse = (key: string, ok: (v: unknown) => boolean, what: string) => {
    const v = t[key];
    if (v === undefined || v === null || ok(v)) return;
    fail(
      `field "${key}" is ${JSON.stringify(v)} but Qwen3.5-MoE ${what}; expected it absent. HINT: remove "${key}" from config.json; a checkpoint trained otherwise is not a qwen3_5_moe model.`,
      { field: key },
    );
  };
  refuse('norm_topk_prob', (v) => v === true, 'always renormalises the top-k router probabilities (true)');
  refuse('decoder_sparse_step', (v) => v === 1, 'has the sparse block in every layer (decoder_sparse_step 1)');
  refuse('mlp_only_layers', (v) => Array.isArray(v) && v.length === 0, 'has no dense-MLP layers (mlp_only_layers [])');
  const auxCoef = parseRouterAuxLoss(t, 'qwen3_5_moe', fail);
  return {
    numExperts: sizes.num_experts!,
    topK: sizes.num_experts_per_tok!,
    intermediateSize: sizes.moe_intermediate_size!,
    normTopkProb: true,
    decoderSparseStep: 1,
    mlpOnlyLayers: [],
    sharedExpertIntermediateSize: sizes.shared_expert_intermediate_size!,
    ...(auxCoef !== undefined ? { routerAuxLossCoef: auxCoef } : {}),
  };
}

/** The MoE fields of config.json for a qwen3_5_moe `moe` (inverse of parseQwen35Moe). */
export function qwen35MoeHFFields(moe: MoeConfig): Record<string, unknown> {
  return {
    num_experts: moe.numExperts,
    num_experts_per_tok: moe.topK,
    moe_intermediate_size: moe.intermediateSize,
    shared_expert_intermediate_size: moe.sharedExpertIntermediateSize,
  };
}
