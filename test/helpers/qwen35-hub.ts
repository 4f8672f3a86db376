/**
 * Tiny Qwen3.5 / Qwen3.5-MoE model folders as the hub publishes them, for the strategy tests:
 * the multimodal config (nested text_config), the text model under `model.language_model.*`, the
 * MoE experts per expert, plus a vision-tower and an MTP tensor the text model drops.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MOE_TEXT, TEXT } from './qwen35-configs.js';
import { writeCheckpoint } from '../../src/model/checkpoint.js';
import { parseModelConfig } from '../../src/model/config.js';
import { convertExpertLayout, initParams, toHostTensors } from '../../src/model/params.js';

export const HUB_MODELS = {
  dense: { model_type: 'qwen3_5', architectures: ['Qwen3_5ForConditionalGeneration'], tie_word_embeddings: true, text_config: TEXT },
  moe: { model_type: 'qwen3_5_moe', architectures: ['Qwen3_5MoeForConditionalGeneration'], tie_word_embeddings: false, text_config: MOE_TEXT },
} as const;
export type HubModel = keyof typeof HUB_MODELS;

/** Writes `HUB_MODELS[which]` with seeded weights (seed 7) into `<dir>/<which>`, sharded at 64 KiB; returns the folder. */
export async function writeHubModel(dir: string, which: HubModel): Promise<string> {
  const out = join(dir, which);
  mkdirSync(out);
  writeFileSync(join(out, 'config.json'), JSON.stringify(HUB_MODELS[which], null, 2));
  const cfg = parseModelConfig(HUB_MODELS[which]);
  const host = convertExpertLayout(toHostTensors(initParams(cfg, 7)), cfg, 'per-expert');
  const f32 = (n: number) => new Uint8Array(new Float32Array(n).fill(0.5).buffer);
  const tensors = [
    ...[...host].map(([n, t]) => ({ name: n.replace(/^model\./, 'model.language_model.'), dtype: 'F32' as const, shape: t.shape, data: t.data })),
    { name: 'model.visual.patch_embed.proj.weight', dtype: 'F32' as const, shape: [3, 4], data: f32(12) },
    { name: 'mtp.fc.weight', dtype: 'F32' as const, shape: [2, 2], data: f32(4) },
  ];
  await writeCheckpoint(out, tensors, { maxShardBytes: 64 * 1024 });
  return out;
}
