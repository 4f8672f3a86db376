/**
 * A checkpoint on disk: one safetensors file, or HF-style shards listed by
 * `model.safetensors.index.json` (`{metadata: {total_size}, weight_map: {tensor: file}}`).
 *
 * Invariants once `Checkpoint.open` returns: every shard's header is valid (see
 * safetensors.ts); every tensor of the weight map is in the file the map names; every tensor
 * of every shard is in the weight map under that shard; no tensor name is in two shards;
 * shard file names are plain names inside the checkpoint folder (no path traversal).
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { CheckpointFormatError, InvalidArgumentError } from '../runtime/errors.js';
import { describe } from '../runtime/device/dtype.js';
import { removeFile } from './file-ops.js';
import { isJsonObject, parseStrictJson } from './strict-json.js';
import {
  MAX_HEADER_BYTES,
  SafetensorsFile,
  asFormatError,
  atomicWrite,
  tensorBytes,
  writeSafetensors,
  type TensorInfo,
  type TensorSource,
} from './safetensors.js';

export const INDEX_FILE = 'model.safetensors.index.json';
export const SINGLE_FILE = 'model.safetensors';

export interface ShardedIndex {
  /** `metadata` as found (HF writes `total_size`; other keys are kept). */
  metadata: Record<string, unknown>;
  /** Tensor name → shard file name, in index order. */
  weightMap: Map<string, string>;
}

export interface CheckpointTensor extends TensorInfo {
  /** Path of the file that holds it. */
  file: string;
}

/** Deepest JSON nesting an index may have (HF's needs 2). */
const INDEX_MAX_DEPTH = 16;

const SHARD_NAME = /^model-(\d{5})-of-(\d{5})\.safetensors$/;

/** Validates a decoded index.json. */
export function parseShardedIndex(raw: unknown, file: string): ShardedIndex {
  const fail = (msg: string, details: Record<string, unknown> = {}): never => {
    throw new CheckpointFormatError(`${file}: ${msg}`, { file, ...details });
  };
  if (!isJsonObject(raw)) return fail(`expected a JSON object {metadata, weight_map} but found ${describe(raw)}.`);
  // Own-property lookups only: a "__proto__" or "constructor" key is data, never a prototype member.
  const own = (o: object, k: string): unknown => (Object.hasOwn(o, k) ? (o as Record<string, unknown>)[k] : undefined);
  const meta = own(raw, 'metadata') ?? {};
  if (!isJsonObject(meta)) return fail(`"metadata" is ${describe(meta)}; expected an object.`);
  const total = own(meta, 'total_size');
  if (total !== undefined && !(typeof total === 'number' && Number.isSafeInteger(total) && total >= 0)) {
    fail(`metadata.total_size is ${describe(total)}; expected a non-negative integer.`);
  }
  const wm = own(raw, 'weight_map');
  if (!isJsonObject(wm)) {
    return fail(`"weight_map" is ${wm === undefined ? 'missing' : describe(wm)}; expected an object of tensor name → shard file.`);
  }
  const weightMap = new Map<string, string>();
  for (const [name, shard] of Object.entries(wm)) {
    if (typeof shard !== 'string' || shard === '' || shard !== basename(shard) || shard === '.' || shard === '..') {
      fail(`weight_map[${JSON.stringify(name)}] is ${describe(shard)}; expected a file name inside the checkpoint folder.`, { tensor: name });
    }
    weightMap.set(name, shard as string);
  }
  return { metadata: Object.assign(Object.create(null) as Record<string, unknown>, meta), weightMap };
}

/** A read-only view of a checkpoint, single-file or sharded. Close it when done. */
export class Checkpoint {
  private readonly byName = new Map<string, { shard: SafetensorsFile; info: TensorInfo }>();

  private constructor(
    /** The path given to `open`. */
    readonly path: string,
    /** Open shards in index order (one for a single-file checkpoint). */
    readonly shards: readonly SafetensorsFile[],
    /** The index, for a sharded checkpoint. */
    readonly index: ShardedIndex | undefined,
    /** Non-fatal findings, e.g. a total_size that disagrees with the tensors. */
    readonly warnings: readonly string[],
  ) {
    for (const shard of shards) for (const info of shard.tensors) this.byName.set(info.name, { shard, info });
  }

  /**
   * Opens a `.safetensors` file, an index.json, or a folder holding either
   * `model.safetensors.index.json` (preferred) or `model.safetensors`.
   */
  static async open(path: string): Promise<Checkpoint> {
    let st;
    try {
      st = await stat(path);
    } catch (err) {
      throw new CheckpointFormatError(
        `${path}: cannot open (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}).`,
        { file: path },
        { cause: err },
      );
    }
    if (st.isDirectory()) {
      let names: string[];
      try {
        names = await readdir(path);
      } catch (err) {
        throw asFormatError(err, path, 'cannot list the folder');
      }
      if (names.includes(INDEX_FILE)) return Checkpoint.openIndex(join(path, INDEX_FILE), path);
      if (names.includes(SINGLE_FILE)) return Checkpoint.openSingle(join(path, SINGLE_FILE), path);
      const found = names.filter((n) => n.endsWith('.safetensors') || n.endsWith('.json'));
      throw new CheckpointFormatError(
        `${path}: no ${INDEX_FILE} or ${SINGLE_FILE} in this folder (found: ${found.length ? found.join(', ') : 'no .safetensors or .json files'}). HINT: pass a .safetensors file directly.`,
        { file: path },
      );
    }
    if (path.endsWith('.json')) return Checkpoint.openIndex(path, path);
    return Checkpoint.openSingle(path, path);
  }

  private static async openSingle(file: string, given: string): Promise<Checkpoint> {
    return new Checkpoint(given, [await SafetensorsFile.open(file)], undefined, []);
  }

  private static async openIndex(indexPath: string, given: string): Promise<Checkpoint> {
    let raw: unknown;
    try {
      // Bounded like a safetensors header: a corrupt or hostile index must not cause a giant read.
      const st = await stat(indexPath);
      if (!st.isFile()) throw new Error(`it is ${st.isDirectory() ? 'a directory' : 'not a regular file'}; expected a JSON file`);
      if (st.size > MAX_HEADER_BYTES) throw new Error(`it is ${st.size} bytes, more than the ${MAX_HEADER_BYTES}-byte limit`);
      const text = new TextDecoder('utf-8', { fatal: true }).decode(await readFile(indexPath));
      // Strict: a duplicate weight_map entry is refused (JSON.parse would keep the last one silently).
      raw = parseStrictJson(text, { maxDepth: INDEX_MAX_DEPTH });
    } catch (err) {
      const why = err instanceof TypeError ? 'it is not valid UTF-8' : ((err as NodeJS.ErrnoException).code ?? (err as Error).message);
      throw new CheckpointFormatError(`${indexPath}: cannot read the shard index (${why}).`, { file: indexPath }, { cause: err });
    }
    const index = parseShardedIndex(raw, indexPath);
    const dir = dirname(indexPath);
    const files = [...new Set(index.weightMap.values())];
    const shards: SafetensorsFile[] = [];
    try {
      for (const f of files) {
        const p = join(dir, f);
        try {
          await stat(p);
        } catch {
          const some = [...index.weightMap].filter(([, s]) => s === f).map(([n]) => n);
          throw new CheckpointFormatError(
            `${indexPath}: shard ${JSON.stringify(f)} is missing from ${dir} but the weight_map puts ${some.length} tensor${some.length === 1 ? '' : 's'} in it (e.g. ${JSON.stringify(some[0])}).`,
            { file: p, tensor: some[0] },
          );
        }
        shards.push(await SafetensorsFile.open(p));
      }
      const owner = new Map<string, string>();
      let total = 0;
      for (const shard of shards) {
        const f = basename(shard.path);
        for (const t of shard.tensors) {
          const mapped = index.weightMap.get(t.name);
          if (mapped !== f) {
            throw new CheckpointFormatError(
              mapped === undefined
                ? `${shard.path}: tensor ${JSON.stringify(t.name)} is not in the weight_map of ${indexPath}.`
                : `${shard.path}: tensor ${JSON.stringify(t.name)} is also in this shard, but the weight_map of ${indexPath} puts it in ${JSON.stringify(mapped)}.`,
              { file: shard.path, tensor: t.name },
            );
          }
          owner.set(t.name, f);
          total += t.end - t.begin;
        }
      }
      for (const [name, f] of index.weightMap) {
        if (!owner.has(name)) {
          throw new CheckpointFormatError(
            `${indexPath}: weight_map puts tensor ${JSON.stringify(name)} in ${JSON.stringify(f)}, but that shard has no such tensor.`,
            { file: join(dir, f), tensor: name },
          );
        }
      }
      const warnings: string[] = [];
      const declared = index.metadata.total_size;
      if (typeof declared === 'number' && declared !== total) {
        warnings.push(`${indexPath}: metadata.total_size is ${declared} but the tensors hold ${total} bytes.`);
      }
      return new Checkpoint(given, shards, index, warnings);
    } catch (err) {
      await Promise.all(shards.map((s) => s.close()));
      throw err;
    }
  }

  /** Every tensor, shard by shard in file order. */
  get tensors(): CheckpointTensor[] {
    return this.shards.flatMap((s) => [...s.tensors].sort((a, b) => a.begin - b.begin).map((t) => ({ ...t, file: s.path })));
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  info(name: string): CheckpointTensor {
    const e = this.byName.get(name);
    if (!e) throw new InvalidArgumentError(`Checkpoint ${this.path} has no tensor ${JSON.stringify(name)}.`, { file: this.path, tensor: name });
    return { ...e.info, file: e.shard.path };
  }

  async read(name: string): Promise<Uint8Array> {
    const e = this.byName.get(name);
    if (!e) this.info(name);
    return e!.shard.read(name);
  }

  /** Every tensor with its bytes, one at a time, shard by shard. */
  async *entries(): AsyncGenerator<[CheckpointTensor, Uint8Array]> {
    for (const shard of this.shards) {
      for await (const [info, data] of shard.entries()) yield [{ ...info, file: shard.path }, data];
    }
  }

  [Symbol.asyncIterator](): AsyncGenerator<[CheckpointTensor, Uint8Array]> {
    return this.entries();
  }

  async close(): Promise<void> {
    await Promise.all(this.shards.map((s) => s.close()));
  }
}

export interface ShardedWriteOptions {
  /** Largest shard in tensor bytes; a tensor larger than this gets a shard of its own. */
  maxShardBytes: number;
  /** safetensors `__metadata__` of every shard (HF writes {format: 'pt'}). */
  metadata?: Record<string, string>;
}

/**
 * Writes `tensors` into `dir` as HF does: `model.safetensors` when they fit in one shard,
 * else `model-0000k-of-0000n.safetensors` plus `model.safetensors.index.json`, greedily in the
 * given order. Each file is written atomically and the index last, then shards and an index
 * left from an earlier save with another shard count are removed.
 */
export async function writeCheckpoint(
  dir: string,
  tensors: readonly TensorSource[],
  opts: ShardedWriteOptions,
): Promise<{ files: string[]; totalSize: number }> {
  const max = opts.maxShardBytes;
  if (!Number.isSafeInteger(max) || max <= 0) {
    throw new InvalidArgumentError(`Expected a positive integer for maxShardBytes but received ${describe(max)}.`, { argument: 'maxShardBytes' });
  }
  const groups: TensorSource[][] = [[]];
  let cur = 0;
  let totalSize = 0;
  for (const t of tensors) {
    const bytes = tensorBytes(t);
    if (groups[groups.length - 1].length > 0 && cur + bytes > max) {
      groups.push([]);
      cur = 0;
    }
    groups[groups.length - 1].push(t);
    cur += bytes;
    totalSize += bytes;
  }
  const n = groups.length;
  const files = n === 1 ? [SINGLE_FILE] : groups.map((_, i) => `model-${pad5(i + 1)}-of-${pad5(n)}.safetensors`);
  for (let i = 0; i < n; i++) await writeSafetensors(join(dir, files[i]), groups[i], { metadata: opts.metadata });
  if (n > 1) {
    const weightMap = Object.create(null) as Record<string, string>; // "__proto__" stays a tensor name
    groups.forEach((g, i) => g.forEach((t) => (weightMap[t.name] = files[i])));
    const body = new TextEncoder().encode(`${JSON.stringify({ metadata: { total_size: totalSize }, weight_map: weightMap }, null, 2)}\n`);
    await atomicWrite(join(dir, INDEX_FILE), async (fh) => {
      await fh.write(body, 0, body.length, 0);
    });
  }
  // Stale files of an earlier save would otherwise be picked up (an old index wins over model.safetensors).
  const keep = new Set(files);
  for (const name of await readdir(dir)) {
    if (keep.has(name)) continue;
    if (SHARD_NAME.test(name) || (n === 1 && name === INDEX_FILE) || (n > 1 && name === SINGLE_FILE)) await removeFile(join(dir, name));
  }
  return { files, totalSize };
}

function pad5(i: number): string {
  return String(i).padStart(5, '0');
}
