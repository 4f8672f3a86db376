/**
 * HF names of a MoE layer's expert weights in the two layouts params.ts describes (fused
 * Transformers-5 tensors, or per-expert Linear weights). Their own module so that the Qwen3 and
 * Qwen3.5 parameter lists can both use them without importing each other.
 */
const layerPrefix = (i: number) => `model.layers.${i}`;

export const fusedExpertNames = (layer: number) => ({
  gateUp: `${layerPrefix(layer)}.mlp.experts.gate_up_proj`,
  down: `${layerPrefix(layer)}.mlp.experts.down_proj`,
});

export const perExpertNames = (layer: number, e: number) => ({
  gate: `${layerPrefix(layer)}.mlp.experts.${e}.gate_proj.weight`,
  up: `${layerPrefix(layer)}.mlp.experts.${e}.up_proj.weight`,
  down: `${layerPrefix(layer)}.mlp.experts.${e}.down_proj.weight`,
});
