/**
 * What the rollout engine needs to know of the Qwen3.5 layer structure (`qwen3_5`,
 * `qwen3_5_moe`), in one place for the runtime parameters, the loader plan and the forward:
 * which layers are Gated DeltaNet and which are gated full attention, the GDN tensors of a
 * layer (each its own runtime parameter: packing them buys nothing, the forward reads each
 * once), and which KV-cache layer a full-attention layer uses (only those have one).
 */
import { isQwen35, type ModelConfig } from '../model/config.js';
import { qwen35ParamSpecs } from '../model/params-qwen35.js';

export interface GdnTensor {
  name: string;
  shape: number[];
}

/** Layer `i` of `cfg` is a Gated DeltaNet layer (false for every Qwen3 layer). */
export function isGdnLayer(cfg: ModelConfig, i: number): boolean {
  return isQwen35(cfg) && cfg.qwen35!.layerTypes[i] === 'linear_attention';
}

/** The full-attention output gate doubles q_proj: Qwen3.5 rows per head are [query ‖ gate]. */
export function qRowsPerHead(cfg: ModelConfig): number {
  return isQwen35(cfg) ? 2 : 1;
}

/** The HF tensors of every GDN layer (`linear_attn.*`), by layer, in HF module order. */
export function gdnTensors(cfg: ModelConfig): Map<number, GdnTensor[]> {
  const out = new Map<number, GdnTensor[]>();
  if (!isQwen35(cfg)) return out;
  for (const s of qwen35ParamSpecs(cfg)) {
    if (s.layer === undefined || !s.name.includes('.linear_attn.')) continue;
    let l = out.get(s.layer);
    if (!l) out.set(s.layer, (l = []));
    l.push({ name: s.name, shape: [...s.shape] });
  }
  return out;
}

/** Per layer, the KV-cache layer it writes (-1 for a GDN layer, which keeps a recurrent state instead). */
export function kvLayerIndex(cfg: ModelConfig): number[] {
  let n = 0;
  return Array.from({ length: cfg.numLayers }, (_, i) => (isGdnLayer(cfg, i) ? -1 : n++));
}
