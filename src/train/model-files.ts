/**
 * The files beside the weights that make a folder a Hugging Face model folder: config.json
 * (every field of the source model's config kept, unknown keys included; the dtype fields
 * set to the dtype the weights are stored in), generation_config.json (copied, or the bos /
 * eos / pad ids of the config) and the tokenizer files (copied). Used by the final export
 * and by every training checkpoint, so both load in transformers and in Ascent alike.
 */
import { copyFile, readFile, writeFile } from 'node:fs/promises';
import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ConfigError } from '../runtime/errors.js';
import { toHFConfig, type ModelConfig } from '../model/config.js';

export const SAVE_DTYPES = ['float32', 'bfloat16', 'float16'] as const;
export type SaveDtype = (typeof SAVE_DTYPES)[number];

/** What transformers and PEFT read beside the weights (copied when the source folder has them). */
export const TOKENIZER_FILES = [
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
  'vocab.json',
  'merges.txt',
  'added_tokens.json',
  'chat_template.jinja',
  'chat_template.json',
];

/** The model folder of `source` (a folder, or a config.json path); null without one. */
export function sourceDir(source: string | undefined): string | null {
  if (!source) return null;
  return existsSync(source) && statSync(source).isDirectory() ? source : dirname(source);
}

/** A JSON file of the source folder, or null when it has none. */
export async function readJsonIfAny(path: string): Promise<Record<string, unknown> | null> {
  if (!existsSync(path)) return null;
  try {
    return JSON.parse(await readFile(path, 'utf8')) as Record<string, unknown>;
  } catch (e) {
    throw new ConfigError(`${path}: not valid JSON (${(e as Error).message}). HINT: fix the input model folder.`, { path });
  }
}

/** The dtype a checkpoint was stored in, from its config (torch_dtype, or transformers 5's dtype). */
export function configDtype(raw: Record<string, unknown> | null): SaveDtype {
  const d = raw?.torch_dtype ?? raw?.dtype;
  return d === 'bfloat16' || d === 'float16' ? d : 'float32';
}

/**
 * Writes config.json (unless `config` is false: a PEFT adapter folder has none),
 * generation_config.json and the tokenizer files of `source` into `dir`.
 */
export async function writeModelFiles(
  dir: string,
  cfg: ModelConfig,
  source: string | undefined,
  dtype: SaveDtype,
  opts: { config?: boolean } = {},
): Promise<void> {
  const src = sourceDir(source);
  const raw = src ? await readJsonIfAny(join(src, 'config.json')) : null;
  const config: Record<string, unknown> = { ...(raw ?? (toHFConfig(cfg) as unknown as Record<string, unknown>)) };
  if ('torch_dtype' in config || !('dtype' in config)) config.torch_dtype = dtype;
  if ('dtype' in config) config.dtype = dtype;
  if (opts.config !== false) await writeFile(join(dir, 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
  const gen = src ? join(src, 'generation_config.json') : null;
  if (gen && existsSync(gen)) await copyFile(gen, join(dir, 'generation_config.json'));
  else {
    const c = cfg as unknown as Record<string, unknown>;
    const ids = Object.fromEntries(
      ['bos_token_id', 'eos_token_id', 'pad_token_id'].map((k) => [k, config[k] ?? c[k]]).filter(([, v]) => v !== undefined && v !== null),
    );
    await writeFile(join(dir, 'generation_config.json'), `${JSON.stringify(ids, null, 2)}\n`);
  }
  if (src) for (const f of TOKENIZER_FILES) if (existsSync(join(src, f))) await copyFile(join(src, f), join(dir, f));
}
