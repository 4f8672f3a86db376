/** Shared pieces of the Qwen3.5 rollout-engine and weight-sync tests: configs, weights with spread, prompts. */
import { parseModelConfig, type ModelConfig } from '../../src/model/config.js';
import { initialParams } from '../../src/model/params.js';
import type { HostParam } from '../../src/model/param-store.js';
import { MOE_TEXT, TEXT } from './qwen35-configs.js';

export const QWEN35 = { dense: parseModelConfig(TEXT), moe: parseModelConfig(MOE_TEXT) } as const;

/**
 * HF parameters of `cfg` with spread: projections scaled up so the logits are far from
 * uniform (greedy picks are no coin flips of rounding), and the zero-centred norms away
 * from zero so the (1 + w) scaling is exercised.
 */
export function spreadParams(cfg: ModelConfig, seed: number): Map<string, HostParam> {
  const p = initialParams(cfg, seed);
  for (const [name, t] of p) {
    if (/proj|embed|lm_head|experts|mlp\.gate\.weight|shared_expert_gate/.test(name)) for (let i = 0; i < t.data.length; i++) t.data[i]! *= 6;
    else if (/(layernorm|model\.norm|q_norm|k_norm)\.weight$/.test(name))
      for (let i = 0; i < t.data.length; i++) t.data[i] = 0.3 * Math.sin(7 * i + name.length);
  }
  return p;
}

/** Prompts of the given lengths, ids spread over [1, vocab). */
export function qwen35Prompts(lengths: readonly number[], vocab: number, seed = 3): number[][] {
  return lengths.map((n, r) => Array.from({ length: n }, (_, t) => 1 + ((seed * 7919 + r * 104729 + t * 31337) % (vocab - 1))));
}

/** Index of the largest value of row `r` of [rows, V] logits (ties to the lower id, as K.sample at temperature 0). */
export function argmaxRow(logits: Float32Array, r: number, V: number): number {
  let best = 0;
  for (let v = 1; v < V; v++) if (logits[r * V + v]! > logits[r * V + best]!) best = v;
  return best;
}
