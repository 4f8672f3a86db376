/**
 * A trained model written as a Hugging Face model folder that transformers loads:
 *
 *   config.json             the input folder's config.json with every key kept (unknown keys
 *                           round-trip), its dtype fields set to the saved dtype; without an
 *                           input folder, the config Ascent parsed, in HF names
 *   generation_config.json  copied from the input folder (else written from the config's ids)
 *   tokenizer files         copied from the input folder (tokenizer.json, tokenizer_config.json,
 *                           special_tokens_map.json, vocab.json, merges.txt, chat_template.jinja, ...)
 *   model.safetensors       HF names, in the input's dtype by default (F32 / BF16 / F16, rounded to
 *                           nearest even), sharded with model.safetensors.index.json past maxShardBytes;
 *                           MoE experts in the source checkpoint's layout by default (see
 *                           HfExportOptions.expertLayout), or as asked
 *
 * Collective over the strategy's ranks (the state is gathered everywhere; rank 0 writes into a
 * temporary folder renamed into place, and every rank learns the outcome).
 */
import { mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Communicator } from '../runtime/comm/comm.js';
import { CheckpointFormatError, ConfigError } from '../runtime/errors.js';
import { Checkpoint, writeCheckpoint } from '../model/checkpoint.js';
import { convertExpertLayout, detectExpertLayout, fromHostTensors, toHostTensors, type ExpertLayout } from '../model/params.js';
import { isQwen35, type ModelConfig } from '../model/config.js';
import { textOnlyWeights } from '../model/params-qwen35.js';
import type { HostParam } from '../model/param-store.js';
import type { TensorSource } from '../model/safetensors.js';
import { anyRank } from './any-rank.js';
import { configDtype, readJsonIfAny, SAVE_DTYPES, sourceDir, writeModelFiles, type SaveDtype } from './model-files.js';
import type { TrainStrategy } from './strategy.js';
import { LORA_MODULES, resolveLoraTargets, type LoraConfig, type LoraTarget } from '../model/lora-config.js';

export { SAVE_DTYPES, TOKENIZER_FILES, configDtype, type SaveDtype } from './model-files.js';

export interface HfExportOptions {
  /** The folder to write (must not exist, or be empty). */
  dir: string;
  /** The model folder training started from (config.json, generation_config.json and tokenizer files are taken from it). */
  source?: string;
  /** Default: the input config's torch_dtype / dtype, else float32. */
  dtype?: SaveDtype;
  /**
   * Default: the layout of the source folder's checkpoint when it has one (a model saves the way
   * it came); without one, fused for qwen3_5_moe (what the hub writes) and per-expert otherwise
   * (what transformers 4.x loads).
   */
  expertLayout?: 'per-expert' | 'fused';
  maxShardBytes?: number;
  comm?: Communicator;
  /**
   * A LoRA run: its config. The export is then PEFT's adapter folder (adapter_model.safetensors
   * with `base_model.model.` names + adapter_config.json, tokenizer files copied), or, with
   * `merged`, the full model with W + (alpha / r)·B·A folded into every adapted weight.
   */
  lora?: LoraConfig;
  merged?: boolean;
}

const ST_DTYPE = { float32: 'F32', bfloat16: 'BF16', float16: 'F16' } as const;

/** fp32 → bf16 bits, round to nearest even (NaN kept a NaN). */
function bf16Bits(x: Float32Array): Uint16Array {
  const u = new Uint32Array(x.buffer, x.byteOffset, x.length);
  const out = new Uint16Array(x.length);
  for (let i = 0; i < u.length; i++) {
    const v = u[i]!;
    out[i] = (v & 0x7fffffff) > 0x7f800000 ? (v >>> 16) | 0x40 : ((v + 0x7fff + ((v >>> 16) & 1)) >>> 16) & 0xffff;
  }
  return out;
}

/** fp32 → IEEE half bits, round to nearest even, overflow to ±inf. */
export function halfBits(x: number): number {
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer)[0]!;
  const sign = (u >>> 16) & 0x8000;
  const exp = (u >>> 23) & 0xff;
  let mant = u & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1),
      half = 1 << (shift - 1);
    if (rem > half || (rem === half && h & 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && h & 1)) h++;
  return sign | h;
}

function encode(p: HostParam, dtype: SaveDtype): Uint8Array {
  if (dtype === 'float32') return new Uint8Array(p.data.buffer, p.data.byteOffset, p.data.byteLength);
  const bits = dtype === 'bfloat16' ? bf16Bits(p.data) : Uint16Array.from(p.data, halfBits);
  return new Uint8Array(bits.buffer);
}

export async function exportHfModel(strategy: TrainStrategy, o: HfExportOptions): Promise<string> {
  if (o.dtype !== undefined && !SAVE_DTYPES.includes(o.dtype))
    throw new ConfigError(`exportHfModel(): dtype must be one of ${SAVE_DTYPES.join(', ')} but is ${JSON.stringify(o.dtype)}.`);
  const params = await strategy.gatherState('params'); // collective: every rank
  const rank = o.comm?.rank ?? 0;
  let error: Error | null = null;
  if (rank === 0) {
    try {
      await writeFolder(strategy, params, o);
    } catch (e) {
      error = e as Error;
    }
  }
  const failed = o.comm ? await anyRank(o.comm, error !== null) : error !== null;
  if (error) throw error;
  if (failed) throw new CheckpointFormatError(`exportHfModel(${o.dir}) failed on rank 0 (see its error); nothing was written.`, { dir: o.dir });
  return o.dir;
}

/** base + scaling · B·A for one adapted weight ([out, in], or per expert [E, out, in]). */
function mergeOne(base: HostParam, a: HostParam, b: HostParam, scaling: number): HostParam {
  const out = Float32Array.from(base.data);
  const experts = base.shape.length === 3 ? base.shape[0]! : 1;
  const [O, I] = base.shape.slice(-2) as [number, number];
  const r = a.shape.at(-2)!;
  for (let e = 0; e < experts; e++) {
    for (let i = 0; i < O; i++) {
      for (let k = 0; k < r; k++) {
        const bik = b.data[e * O * r + i * r + k]! * scaling;
        if (bik === 0) continue;
        const arow = e * r * I + k * I,
          orow = e * O * I + i * I;
        for (let j = 0; j < I; j++) out[orow + j]! += bik * a.data[arow + j]!;
      }
    }
  }
  return { shape: [...base.shape], data: out };
}

async function writeAdapter(tmp: string, params: Map<string, HostParam>, targets: LoraTarget[], lora: LoraConfig, source: string | undefined): Promise<void> {
  const sources: TensorSource[] = targets
    .flatMap((t) => [t.a, t.b])
    .map((name) => {
      const p = params.get(name);
      if (!p) throw new CheckpointFormatError(`exportHfModel(): the strategy's state has no LoRA parameter ${name}.`, { tensor: name });
      return {
        name: `base_model.model.${name}`,
        dtype: 'F32' as const,
        shape: p.shape,
        data: new Uint8Array(p.data.buffer, p.data.byteOffset, p.data.byteLength),
      };
    });
  const { writeSafetensors } = await import('../model/safetensors.js');
  await writeSafetensors(join(tmp, 'adapter_model.safetensors'), sources, { metadata: { format: 'pt' } });
  const modules = [...new Set(lora.targetModules.map((m) => LORA_MODULES[m].split('.').at(-1)!))];
  const config = {
    peft_type: 'LORA',
    task_type: 'CAUSAL_LM',
    base_model_name_or_path: source ?? null,
    r: lora.rank,
    lora_alpha: lora.alpha,
    lora_dropout: lora.dropout,
    target_modules: modules,
    ...(lora.targetParameters.length ? { target_parameters: lora.targetParameters } : {}),
    bias: 'none',
    fan_in_fan_out: false,
    inference_mode: true,
    init_lora_weights: true,
    use_rslora: false,
    use_dora: false,
    modules_to_save: null,
  };
  await writeFile(join(tmp, 'adapter_config.json'), `${JSON.stringify(config, null, 2)}\n`);
}

/** The source checkpoint's expert layout, else the one the model type's checkpoints are published in. */
async function defaultExpertLayout(cfg: ModelConfig, src: string | null): Promise<ExpertLayout> {
  if (src && (existsSync(join(src, 'model.safetensors')) || existsSync(join(src, 'model.safetensors.index.json')))) {
    const ck = await Checkpoint.open(src);
    try {
      const names = ck.tensors.map((t) => t.name);
      const layout = detectExpertLayout(isQwen35(cfg) ? [...textOnlyWeights(new Map(names.map((n) => [n, n])), () => {}).keys()] : names, cfg);
      if (layout) return layout;
    } finally {
      await ck.close();
    }
  }
  return cfg.modelType === 'qwen3_5_moe' ? 'fused' : 'per-expert';
}

async function writeFolder(strategy: TrainStrategy, params: Map<string, HostParam>, o: HfExportOptions): Promise<void> {
  const src = sourceDir(o.source);
  const rawConfig = src ? await readJsonIfAny(join(src, 'config.json')) : null;
  const dtype = o.dtype ?? configDtype(rawConfig);
  const targets = o.lora ? resolveLoraTargets(strategy.cfg, o.lora) : [];
  if (o.lora && o.merged) {
    const scaling = o.lora.alpha / o.lora.rank;
    params = new Map(params);
    for (const t of targets) params.set(t.base, mergeOne(params.get(t.base)!, params.get(t.a)!, params.get(t.b)!, scaling));
  }
  let tensors = params;
  if (strategy.cfg.moe && (o.expertLayout ?? (await defaultExpertLayout(strategy.cfg, src))) === 'per-expert')
    tensors = fromHostTensors(convertExpertLayout(toHostTensors(params), strategy.cfg, 'per-expert'));
  // LoRA adapters are exported as PEFT adapters, not model weights.
  const sources: TensorSource[] = [...tensors]
    .filter(([n]) => !/\.lora_[AB](\.|$)/.test(n))
    .map(([name, p]) => ({ name, dtype: ST_DTYPE[dtype], shape: p.shape, data: () => encode(p, dtype) }));
  if (existsSync(o.dir) && (await readdir(o.dir)).length > 0) {
    throw new ConfigError(`exportHfModel(): ${o.dir} exists and is not empty. HINT: choose a new folder (an export never overwrites one).`, { dir: o.dir });
  }
  const tmp = `${o.dir}.tmp-${process.pid}`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp, { recursive: true });
  try {
    const adapter = o.lora !== undefined && !o.merged;
    if (adapter) await writeAdapter(tmp, params, targets, o.lora!, src ?? undefined);
    else await writeCheckpoint(tmp, sources, { maxShardBytes: o.maxShardBytes ?? 2 ** 31, metadata: { format: 'pt' } });
    await writeModelFiles(tmp, strategy.cfg, o.source, dtype, { config: !adapter });
    if (existsSync(o.dir)) await rm(o.dir, { recursive: true, force: true });
    await rename(tmp, o.dir);
  } catch (e) {
    await rm(tmp, { recursive: true, force: true }).catch(() => undefined);
    throw e;
  }
}
