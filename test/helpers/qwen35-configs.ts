/** Shrunken Qwen3.5 and Qwen3.5-MoE text configs in the hub's field spelling, shared by the Qwen3.5 tests. */

/** Qwen3.5: three GDN layers, then gated full attention. */
export const TEXT = {
  model_type: 'qwen3_5_text',
  hidden_size: 32,
  intermediate_size: 48,
  num_hidden_layers: 4,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 16,
  hidden_act: 'silu',
  rms_norm_eps: 1e-6,
  vocab_size: 40,
  attention_bias: false,
  linear_num_key_heads: 2,
  linear_num_value_heads: 4,
  linear_key_head_dim: 8,
  linear_value_head_dim: 8,
  linear_conv_kernel_dim: 4,
  layer_types: ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention'],
  rope_parameters: { rope_type: 'default', rope_theta: 10000000, partial_rotary_factor: 0.25, mrope_section: [1, 1, 0], mrope_interleaved: true },
  max_position_embeddings: 262144,
  eos_token_id: 248044,
  dtype: 'bfloat16',
};

/** A shrunken Qwen3.5-MoE text config as the hub writes it: no intermediate_size, every layer sparse. */
export const MOE_TEXT = (() => {
  const { intermediate_size: _i, ...rest } = TEXT;
  return {
    ...rest,
    model_type: 'qwen3_5_moe_text',
    num_experts: 4,
    num_experts_per_tok: 2,
    moe_intermediate_size: 8,
    shared_expert_intermediate_size: 12,
    router_aux_loss_coef: 0.001,
    output_router_logits: false,
  };
})();

/**
 * `text` made fit for the GRPO loop's synthetic task: its 64-token vocabulary, EOS id 2 and
 * short sequences, fp32 weights (as examples/models/tiny-*).
 */
export function grpoReady<T extends object>(text: T): T & Record<string, unknown> {
  return { ...text, vocab_size: 64, bos_token_id: 1, eos_token_id: 2, pad_token_id: 0, max_position_embeddings: 128, dtype: 'float32' };
}
