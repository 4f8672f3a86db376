/**
 * Training checkpoints: the full model in HF names (sharded safetensors + config.json,
 * loadable by any HF-format reader), the AdamW state and the trainer state, saved from
 * any strategy and loadable into any other (the state is gathered to full HF-named
 * tensors, so a run saved on fsdp2 x 8 resumes on megatron tp2 or one device).
 *
 * Layout under `root`:
 *   step-000010/ model.safetensors | model-0000k-of-0000n.safetensors + index.json, config.json
 *                optimizer/  (same format; tensors `exp_avg.<param>`, `exp_avg_sq.<param>`)
 *                trainer_state.json  { format, step, optimizerSteps, strategy, layout, extra }
 *   latest       the name of the newest complete step folder
 *
 * Atomicity and crash recovery (temporary folder, renames, `latest`, `.old-` copies of a
 * re-saved step): see checkpoint-dir.ts.
 *
 * Collective: every rank of the strategy calls save/load. The state is gathered on
 * every rank (gatherState); rank 0 writes; the outcome is agreed by an all-reduce so
 * a failed write raises on every rank instead of leaving the others waiting. Loading
 * into fsdp2 / megatron goes through the sharded loader (each rank keeps its pieces).
 */
import { toFloat32 } from '../model/host-float.js';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Communicator } from '../runtime/comm/comm.js';
import { CheckpointFormatError, InvalidArgumentError } from '../runtime/errors.js';
import { Checkpoint, writeCheckpoint } from '../model/checkpoint.js';
import { parseModelConfig, type ModelConfig } from '../model/config.js';
import type { HostParam } from '../model/param-store.js';
import type { TensorSource } from '../model/safetensors.js';
import { isJsonObject, parseStrictJson, type JsonValue } from '../model/strict-json.js';
import { describe } from '../runtime/device/dtype.js';
import { makeDir } from '../model/file-ops.js';
import { exists, LATEST_FILE, latestCheckpoint, publishStep, stepDirName, writeJson } from './checkpoint-dir.js';
import { anyRank } from './any-rank.js';
import { writeModelFiles } from './model-files.js';
import type { FullState, TrainStrategy } from './strategy.js';
import type { HfLoadOptions } from './load-hf-shards.js';

export const TRAIN_STATE_FILE = 'trainer_state.json';
export const CHECKPOINT_FORMAT = 1;
export { LATEST_FILE, latestCheckpoint, stepDirName };

export interface SaveOptions {
  /** Folder holding the step folders and `latest`. */
  root: string;
  /** Training step the checkpoint is taken after. */
  step: number;
  /** The strategy's world (rank 0 writes; the outcome is all-reduced). Omit on one device. */
  comm?: Communicator;
  /** Largest safetensors shard (default 2 GiB). */
  maxShardBytes?: number;
  /** JSON-serialisable trainer state to restore with the weights (data cursor, seeds, metrics). */
  extra?: Record<string, unknown>;
  /** The model folder training started from: its config.json fields, generation config and tokenizer files go into every step folder. */
  source?: string;
}

export interface TrainerStateFile {
  format: number;
  step: number;
  optimizerSteps: number;
  strategy: string;
  layout: string;
  extra: Record<string, unknown>;
}

function hostSources(state: Map<string, HostParam>, prefix = ''): TensorSource[] {
  return [...state].map(([name, p]) => ({
    name: prefix + name,
    dtype: 'F32' as const,
    shape: p.shape,
    data: new Uint8Array(p.data.buffer, p.data.byteOffset, p.data.byteLength),
  }));
}

/** Agrees on success across ranks: throws on every rank when any rank failed. */
async function agree(comm: Communicator | undefined, local: Error | null, what: string): Promise<void> {
  const failed = comm ? await anyRank(comm, local !== null) : local !== null;
  if (local) throw local;
  if (failed) throw new CheckpointFormatError(`${what} failed on another rank (see that rank's error); nothing was changed here.`, { what });
}

/** Saves `strategy` under `root/step-NNNNNN` atomically and points `latest` at it. Returns the step folder. */
export async function saveCheckpoint(strategy: TrainStrategy, opts: SaveOptions): Promise<string> {
  if (!Number.isSafeInteger(opts.step) || opts.step < 0)
    throw new InvalidArgumentError(`saveCheckpoint(): expected a non-negative integer step but received ${opts.step}.`);
  const maxShardBytes = opts.maxShardBytes ?? 2 ** 31;
  // Collective gathers first, on every rank, in the same order.
  const params = await strategy.gatherState('params');
  const expAvg = await strategy.gatherState('exp_avg');
  const expAvgSq = await strategy.gatherState('exp_avg_sq');
  const rank = opts.comm?.rank ?? 0;
  const final = join(opts.root, stepDirName(opts.step));
  let error: Error | null = null;
  if (rank === 0) {
    try {
      await writeStep(strategy, opts, maxShardBytes, params, expAvg, expAvgSq);
    } catch (e) {
      error = e as Error;
    }
  }
  await agree(opts.comm, error, `saveCheckpoint(${final})`);
  return final;
}

async function writeStep(
  strategy: TrainStrategy,
  opts: SaveOptions,
  maxShardBytes: number,
  params: Map<string, HostParam>,
  expAvg: Map<string, HostParam>,
  expAvgSq: Map<string, HostParam>,
): Promise<void> {
  await publishStep(opts.root, opts.step, async (tmp) => {
    await makeDir(join(tmp, 'optimizer'));
    await writeCheckpoint(tmp, hostSources(params), { maxShardBytes, metadata: { format: 'pt' } });
    const optimizer = [...hostSources(expAvg, 'exp_avg.'), ...hostSources(expAvgSq, 'exp_avg_sq.')];
    await writeCheckpoint(join(tmp, 'optimizer'), optimizer, { maxShardBytes, metadata: { format: 'pt' } });
    // A step folder is a Hugging Face model folder too (fp32 weights): the source model's
    // config (every field), generation config and tokenizer files travel with it.
    await writeModelFiles(tmp, strategy.cfg, opts.source, 'float32');
    const state: TrainerStateFile = {
      format: CHECKPOINT_FORMAT,
      step: opts.step,
      optimizerSteps: strategy.optimizerSteps,
      strategy: strategy.kind,
      layout: strategy.layout,
      extra: opts.extra ?? {},
    };
    await writeJson(join(tmp, TRAIN_STATE_FILE), state);
  });
}

export interface LoadOptions {
  /** A step folder, or a root holding `latest`. */
  path: string;
  comm?: Communicator;
  /** How a sharded strategy's ranks get the tensors (default: rank 0 reads and broadcasts). */
  load?: HfLoadOptions;
}

export interface LoadedCheckpoint {
  dir: string;
  state: TrainerStateFile;
  /** Bytes of tensor data this rank kept on its host from the files (its pieces, or the whole state on the full path). */
  hostBytes: number;
}

/** Every tensor of a checkpoint (single file or sharded; F32, BF16 or F16) as host fp32 arrays by name. */
export async function readF32Checkpoint(dir: string): Promise<Map<string, HostParam>> {
  const ckpt = await Checkpoint.open(dir);
  const out = new Map<string, HostParam>();
  try {
    for await (const [info, bytes] of ckpt) {
      out.set(info.name, { shape: [...info.shape], data: toFloat32(bytes, info.dtype, { file: info.file, tensor: info.name }) });
    }
  } finally {
    await ckpt.close();
  }
  return out;
}

function sameModel(a: ModelConfig, b: ModelConfig): string | null {
  const keys = ['modelType', 'hiddenSize', 'numLayers', 'numHeads', 'numKvHeads', 'headDim', 'vocabSize', 'intermediateSize', 'tieWordEmbeddings'] as const;
  for (const k of keys) if (a[k] !== b[k]) return `${k} is ${JSON.stringify(a[k])} in the checkpoint but ${JSON.stringify(b[k])} in the model`;
  if (JSON.stringify(a.moe ?? null) !== JSON.stringify(b.moe ?? null))
    return `the MoE settings differ (${JSON.stringify(a.moe ?? null)} vs ${JSON.stringify(b.moe ?? null)})`;
  return null;
}

/**
 * Restores parameters and AdamW state into `strategy` (collective). The small files
 * (trainer_state.json, config.json) are read and agreed on by every rank first. A sharded
 * strategy (loadShards: fsdp2, megatron) then takes the parameters and both moments through
 * the sharded loader with the placements of its initial load, so each rank's host keeps
 * its own pieces only (rank 0 reads and broadcasts in buckets, or every rank reads, as
 * `load` says; LoRA adapters and their moments come whole, they are small); a bad tensor
 * stops every rank with one CheckpointFormatError naming it. The single strategy reads the
 * whole folder (the files are on a shared filesystem in this runtime).
 */
export async function loadCheckpoint(strategy: TrainStrategy, opts: LoadOptions): Promise<LoadedCheckpoint> {
  let head: { dir: string; state: TrainerStateFile } | null = null;
  let error: Error | null = null;
  try {
    head = await readStepHead(strategy, opts.path);
  } catch (e) {
    error = e as Error;
  }
  // Every rank must have read it before any enters a collective load.
  await agree(opts.comm, error, `loadCheckpoint(${opts.path})`);
  const { dir, state } = head!;
  const params = strategy.loadShardedState && (await strategy.loadShards?.(dir, { groups: [''] }, opts.load));
  if (params) {
    const [expAvg, expAvgSq] = await strategy.loadShards!(join(dir, 'optimizer'), { groups: ['exp_avg.', 'exp_avg_sq.'], optional: true }, opts.load);
    const kept = [params[0]!, expAvg!, expAvgSq!];
    await strategy.loadShardedState!({ params: params[0]!, optimizer: { step: state.optimizerSteps, expAvg: expAvg!, expAvgSq: expAvgSq! } });
    return { dir, state, hostBytes: hostBytesOf(kept) };
  }
  let full: FullState | null = null;
  try {
    full = await readFullState(dir, state);
  } catch (e) {
    error = e as Error;
  }
  await agree(opts.comm, error, `loadCheckpoint(${dir})`);
  await strategy.loadState(full!);
  return { dir, state, hostBytes: hostBytesOf([full!.params, full!.optimizer!.expAvg, full!.optimizer!.expAvgSq]) };
}

function hostBytesOf(maps: ReadonlyArray<ReadonlyMap<string, { data: Float32Array }>>): number {
  return maps.reduce((a, m) => a + [...m.values()].reduce((b, t) => b + t.data.byteLength, 0), 0);
}

/** The step folder `path` names (or `latest` under it), its trainer state, and a check that it holds this model. */
async function readStepHead(strategy: TrainStrategy, path: string): Promise<{ dir: string; state: TrainerStateFile }> {
  let dir = path;
  if (!(await exists(join(dir, TRAIN_STATE_FILE)))) {
    const latest = await latestCheckpoint(dir);
    if (!latest)
      throw new CheckpointFormatError(
        `${dir}: neither a step folder (no ${TRAIN_STATE_FILE}) nor a checkpoint root (no ${LATEST_FILE}). HINT: pass the --save folder of a run or one of its step-NNNNNN folders.`,
        { file: dir },
      );
    dir = latest;
  }
  const state = await readTrainerState(dir);
  const cfg = parseModelConfig(await readJsonFile(join(dir, 'config.json')), join(dir, 'config.json'));
  const diff = sameModel(cfg, strategy.cfg);
  if (diff) throw new CheckpointFormatError(`${dir} holds another model: ${diff}.`, { file: dir });
  return { dir, state };
}

/** The whole state of a step folder as host fp32 (the path of strategies without loadShards). */
async function readFullState(dir: string, state: TrainerStateFile): Promise<FullState> {
  const params = await readF32Checkpoint(dir);
  const opt = await readF32Checkpoint(join(dir, 'optimizer'));
  const expAvg = new Map<string, HostParam>();
  const expAvgSq = new Map<string, HostParam>();
  for (const [name, p] of opt) {
    if (name.startsWith('exp_avg_sq.')) expAvgSq.set(name.slice('exp_avg_sq.'.length), p);
    else if (name.startsWith('exp_avg.')) expAvg.set(name.slice('exp_avg.'.length), p);
    else throw new CheckpointFormatError(`${join(dir, 'optimizer')}: unexpected tensor ${name}; expected exp_avg.* and exp_avg_sq.*.`, { file: dir });
  }
  return { params, optimizer: { step: state.optimizerSteps, expAvg, expAvgSq } };
}

/** A step folder's validated trainer_state.json (CheckpointFormatError naming the file when it is malformed). */
export async function readTrainerState(stepDir: string): Promise<TrainerStateFile> {
  const file = join(stepDir, TRAIN_STATE_FILE);
  return checkTrainerState(await readJsonFile(file), file);
}

/** A small JSON file of a checkpoint, parsed strictly (duplicate keys refused, null-prototype objects). */
async function readJsonFile(path: string): Promise<JsonValue> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new CheckpointFormatError(
      `${path}: cannot read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}). HINT: the step folder is incomplete; load another step.`,
      { file: path },
      { cause: err },
    );
  }
  try {
    return parseStrictJson(text);
  } catch (err) {
    throw new CheckpointFormatError(`${path}: not valid JSON (${(err as Error).message}).`, { file: path }, { cause: err });
  }
}

function checkTrainerState(raw: JsonValue, file: string): TrainerStateFile {
  const fail = (msg: string): never => {
    throw new CheckpointFormatError(`${file}: ${msg}`, { file });
  };
  if (!isJsonObject(raw)) return fail(`expected a JSON object but found ${describe(raw)}.`);
  const own = (k: string): unknown => (Object.hasOwn(raw, k) ? raw[k] : undefined);
  if (own('format') !== CHECKPOINT_FORMAT) fail(`format ${JSON.stringify(own('format'))}; this version reads format ${CHECKPOINT_FORMAT}.`);
  for (const k of ['step', 'optimizerSteps']) {
    const v = own(k);
    if (!(typeof v === 'number' && Number.isSafeInteger(v) && v >= 0)) fail(`"${k}" is ${describe(v)}; expected a non-negative integer.`);
  }
  for (const k of ['strategy', 'layout']) if (typeof own(k) !== 'string') fail(`"${k}" is ${describe(own(k))}; expected a string.`);
  const extra = own('extra') ?? {};
  if (!isJsonObject(extra)) fail(`"extra" is ${describe(extra)}; expected an object.`);
  return {
    format: CHECKPOINT_FORMAT,
    step: own('step') as number,
    optimizerSteps: own('optimizerSteps') as number,
    strategy: own('strategy') as string,
    layout: own('layout') as string,
    extra: { ...(extra as Record<string, unknown>) },
  };
}
