/**
 * The rollout engine's weight precision (`dtype` engine option, `engine.dtype` in a GRPO
 * config): 'float32' (default) holds every runtime parameter in fp32; 'bfloat16' holds the
 * matmul weights in bf16 — half the device bytes and half the bytes a weight sync moves —
 * and keeps the rest fp32. The bf16 weights are the round-to-nearest-even cast of the
 * fp32 ones, so the engine's bf16 bytes are a function of the trainer's fp32 weights (what
 * the sync's fingerprint check compares against).
 *
 * bf16 (matmul weights): attention q/k/v and o projections, the dense MLP's gate_up / down,
 * the experts' w13 / w2, the Qwen3.5 Gated DeltaNet projections (in_proj_*, out_proj), the
 * shared expert's gate_up / down, the embedding table and lm head. Their matmuls take the
 * activations cast to bf16 and accumulate in fp32 (the kernel has no fp32 × bf16 path).
 * fp32: the norms, the MoE router (mlp.gate) and the shared expert's gate (a rounding of
 * the router's logits flips near-tied expert choices, which changes an output by far more
 * than bf16 tolerance; both are tiny), the GDN conv1d, A_log and dt_bias (state recurrences).
 * Activations, softmax, sampling and log-probs stay fp32.
 */
import type { DType } from '../runtime/device/dtype.js';
import { checkPrecision, PRECISIONS, type Precision } from '../runtime/device/dtype.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import type { ModelConfig } from '../model/config.js';
import { hfLoadPlan } from './loader.js';
import { tpShard } from './tp-shard.js';

export const ENGINE_DTYPES = PRECISIONS;
export type EngineDtype = Precision;

/** Checks an engine dtype option (`what` names it in the message); undefined is 'float32'. */
export function checkEngineDtype(value: unknown, what = 'dtype'): EngineDtype {
  return checkPrecision(
    value,
    what,
    "'bfloat16' holds the engine's matmul weights in bf16 (half the bytes; activations stay fp32); 'float32' (the default) holds everything in fp32.",
  );
}

const BF16_WEIGHT =
  /(\.self_attn\.(qkv_proj|o_proj)\.weight|\.mlp\.(gate_up_proj|down_proj)\.weight|\.mlp\.experts\.w(13|2)_weight|\.mlp\.shared_expert\.(gate_up_proj|down_proj)\.weight|\.linear_attn\.(in_proj_qkv|in_proj_z|in_proj_a|in_proj_b|out_proj)\.weight|^model\.embed_tokens\.weight|^lm_head\.weight)$/;

/** The device dtype of runtime parameter `name` in an engine of weight precision `dtype`. */
export function runtimeDtypeOf(name: string, dtype: EngineDtype): DType {
  return dtype === 'bfloat16' && BF16_WEIGHT.test(name) ? 'bf16' : 'fp32';
}

const firstParams = new WeakMap<ModelConfig, Map<string, string>>();

/**
 * The device dtype the engine holds HF tensor `hf` of `cfg` in (every runtime parameter an
 * HF tensor fills has the same): what a weight sync sends it as and what verification
 * compares it as. Unknown names are an error.
 */
export function hfDtypeOf(cfg: ModelConfig, hf: string, dtype: EngineDtype): DType {
  let m = firstParams.get(cfg);
  if (!m) {
    m = new Map([...hfLoadPlan(cfg, tpShard(cfg, 1, 0))].map(([n, e]) => [n, e.writes[0]!.param]));
    firstParams.set(cfg, m);
  }
  const param = m.get(hf);
  if (param === undefined) throw new InvalidArgumentError(`No HF tensor named ${JSON.stringify(hf)} in this ${cfg.modelType} config.`, { tensor: hf });
  return runtimeDtypeOf(param, dtype);
}
