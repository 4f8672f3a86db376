/**
 * Tiny Qwen3.5 and Qwen3.5-MoE configs for the train-step bench, at the scale of
 * examples/models/tiny-{dense,moe} (hidden 128, 4 heads, 2 KV heads, head dim 32, vocab 64)
 * so their rows compare with the Qwen3 ones: one Gated DeltaNet layer (2 key / 4 value heads
 * of 32) then one gated full-attention layer; dense intermediate 384; MoE 8 experts, top-2,
 * expert intermediate 128 plus a shared expert of 128. HF field spelling (parseModelConfig).
 */
const TEXT = {
  model_type: 'qwen3_5_text',
  hidden_size: 128,
  intermediate_size: 384,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 32,
  hidden_act: 'silu',
  rms_norm_eps: 1e-6,
  vocab_size: 64,
  attention_bias: false,
  linear_num_key_heads: 2,
  linear_num_value_heads: 4,
  linear_key_head_dim: 32,
  linear_value_head_dim: 32,
  linear_conv_kernel_dim: 4,
  layer_types: ['linear_attention', 'full_attention'],
  rope_parameters: { rope_type: 'default', rope_theta: 10000, partial_rotary_factor: 0.25, mrope_section: [2, 1, 1], mrope_interleaved: true },
  max_position_embeddings: 128,
  tie_word_embeddings: true,
  eos_token_id: 2,
  dtype: 'float32',
};

export const TINY_QWEN35 = {
  'qwen3.5': TEXT,
  'qwen3.5-moe': (() => {
    const { intermediate_size: _i, ...rest } = TEXT;
    return {
      ...rest,
      model_type: 'qwen3_5_moe_text',
      tie_word_embeddings: false,
      num_experts: 8,
      num_experts_per_tok: 2,
      moe_intermediate_size: 128,
      shared_expert_intermediate_size: 128,
      router_aux_loss_coef: 0.001,
      output_router_logits: false,
    };
  })(),
} as const;
