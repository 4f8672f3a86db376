/**
 * The safetensors file format (https://github.com/huggingface/safetensors), host side.
 *
 * Layout: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON (the header, possibly
 * padded with spaces), then the data section. The header maps tensor names to
 * `{dtype, shape, data_offsets: [begin, end)}` (offsets relative to the first data byte) and
 * may hold `__metadata__` (string → string).
 *
 * Invariants once `SafetensorsFile.open` returns (checked before any tensor allocation):
 * - the header is at most MAX_HEADER_BYTES and lies inside the file;
 * - every tensor has a known dtype, a shape of non-negative safe integers, and
 *   `end - begin === numel × dtype size`;
 * - the tensors, sorted by offset, tile the data section exactly: no overlap, no gap, no
 *   trailing bytes (the same rule as the reference Rust implementation);
 * - names are unique (duplicate JSON keys are detected, not silently last-wins).
 * So a read never allocates more than the file holds and never reads outside it.
 */
import { constants } from 'node:fs';
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { basename, dirname, join } from 'node:path';
import { CheckpointFormatError, InvalidArgumentError } from '../runtime/errors.js';
import { describe } from '../runtime/device/dtype.js';
import type { DType } from '../runtime/device/dtype.js';
import { beforeFileOp, createFile, renamePath, syncDir, syncFile } from './file-ops.js';
import { StrictJsonError, isJsonObject, parseStrictJson, type JsonObject, type JsonValue } from './strict-json.js';

export const SAFETENSORS_DTYPES = ['F32', 'BF16', 'F16', 'I32', 'I64', 'U8', 'I8', 'BOOL'] as const;
export type SafetensorsDType = (typeof SAFETENSORS_DTYPES)[number];

const DTYPE_BYTES: Readonly<Record<SafetensorsDType, number>> = { F32: 4, BF16: 2, F16: 2, I32: 4, I64: 8, U8: 1, I8: 1, BOOL: 1 };

/** Device dtype of each safetensors dtype that the device supports. */
export const DEVICE_DTYPE: Readonly<Partial<Record<SafetensorsDType, DType>>> = {
  F32: 'fp32',
  BF16: 'bf16',
  F16: 'fp16',
  I32: 'int32',
  I64: 'int64',
  U8: 'uint8',
};

/** Headers above this are rejected before they are read (the reference implementation uses the same bound). */
export const MAX_HEADER_BYTES = 100_000_000;

/** Deepest JSON nesting a header may have (a valid one needs 3: header → entry → shape). */
const HEADER_MAX_DEPTH = 8;

export function safetensorsDTypeSize(dtype: SafetensorsDType): number {
  return DTYPE_BYTES[dtype];
}

export function isSafetensorsDType(value: unknown): value is SafetensorsDType {
  return typeof value === 'string' && Object.hasOwn(DTYPE_BYTES, value);
}

export interface TensorInfo {
  name: string;
  dtype: SafetensorsDType;
  shape: number[];
  /** Byte range [begin, end) relative to the start of the data section. */
  begin: number;
  end: number;
}

export interface ParsedHeader {
  metadata: Record<string, string>;
  /** In header order. */
  tensors: TensorInfo[];
}

/** Exact number of elements of a shape of non-negative integers (0 when any dimension is 0). */
export function numelBig(shape: readonly number[]): bigint {
  let n = 1n;
  for (const d of shape) n *= BigInt(d);
  return n;
}

/** Number of elements of `shape`, or undefined when it exceeds Number.MAX_SAFE_INTEGER. */
export function numelOf(shape: readonly number[]): number | undefined {
  const n = numelBig(shape);
  return n > BigInt(Number.MAX_SAFE_INTEGER) ? undefined : Number(n);
}

/**
 * Validates a header (the N JSON bytes) against a data section of `dataLength` bytes.
 * Every problem is a CheckpointFormatError naming `file` and, when one is at fault, the tensor.
 */
export function parseSafetensorsHeader(headerBytes: Uint8Array, dataLength: number, file: string): ParsedHeader {
  const fail = (msg: string, tensor?: string): never => {
    throw new CheckpointFormatError(`${file}: ${tensor !== undefined ? `tensor ${JSON.stringify(tensor)}: ` : ''}${msg}`, { file, tensor });
  };
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(headerBytes);
  } catch {
    return fail('header is not valid UTF-8. The file is corrupt or not safetensors.');
  }
  let json: JsonValue;
  try {
    json = parseStrictJson(text, { maxDepth: HEADER_MAX_DEPTH });
  } catch (err) {
    // Duplicate keys are refused like the reference implementation does (JSON.parse would keep the last).
    if (!(err instanceof StrictJsonError)) throw err;
    const e = err;
    if (e.duplicateKey !== undefined && e.path.length === 0) fail('appears twice in the header; expected unique tensor names.', e.duplicateKey);
    if (e.duplicateKey !== undefined && e.path.length === 1) {
      if (e.path[0] === '__metadata__') fail(`__metadata__ key ${JSON.stringify(e.duplicateKey)} appears twice; expected unique keys.`);
      fail(`key ${JSON.stringify(e.duplicateKey)} appears twice in the entry; expected dtype, shape and data_offsets once each.`, e.path[0]);
    }
    return fail(`header is not valid JSON: ${e.message}. The file is corrupt or not safetensors.`);
  }
  if (!isJsonObject(json)) {
    return fail(`header is ${describe(json)}; expected a JSON object of tensor name → {dtype, shape, data_offsets}.`);
  }

  const metaPairs: Array<[string, string]> = [];
  const tensors: TensorInfo[] = [];
  for (const [name, entry] of Object.entries(json)) {
    if (name === '__metadata__') {
      if (!isJsonObject(entry)) fail(`__metadata__ is ${describe(entry)}; expected an object of string values.`);
      for (const [k, v] of Object.entries(entry as JsonObject)) {
        if (typeof v !== 'string') fail(`__metadata__[${JSON.stringify(k)}] is ${describe(v)}; expected a string.`);
        metaPairs.push([k, v as string]);
      }
      continue;
    }
    tensors.push(checkEntry(name, entry, dataLength, fail));
  }
  checkCoverage(tensors, dataLength, fail);
  // fromEntries defines own properties, so a "__proto__" key stays data; the null prototype
  // keeps "toString" or "constructor" lookups from reaching Object.prototype.
  return { metadata: Object.assign(Object.create(null) as Record<string, string>, Object.fromEntries(metaPairs)), tensors };
}

function checkEntry(name: string, entry: JsonValue, dataLength: number, fail: (msg: string, tensor?: string) => never): TensorInfo {
  if (!isJsonObject(entry)) return fail(`entry is ${describe(entry)}; expected {dtype, shape, data_offsets}.`, name);
  const e = entry;
  for (const key of Object.keys(e)) {
    if (key !== 'dtype' && key !== 'shape' && key !== 'data_offsets') fail(`unknown key "${key}"; expected only dtype, shape, data_offsets.`, name);
  }
  if (!isSafetensorsDType(e.dtype)) {
    fail(`dtype is ${e.dtype === undefined ? 'missing' : describe(e.dtype)}; expected one of ${SAFETENSORS_DTYPES.join(', ')}.`, name);
  }
  const dtype = e.dtype as SafetensorsDType;
  const isIndex = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
  if (!Array.isArray(e.shape) || !e.shape.every(isIndex)) {
    fail(`shape is ${e.shape === undefined ? 'missing' : JSON.stringify(e.shape)}; expected a list of non-negative integers.`, name);
  }
  const shape = e.shape as number[];
  const offs = e.data_offsets;
  if (!Array.isArray(offs) || offs.length !== 2 || !offs.every(isIndex)) {
    fail(`data_offsets is ${offs === undefined ? 'missing' : JSON.stringify(offs)}; expected [begin, end] with non-negative integers.`, name);
  }
  const [begin, end] = offs as [number, number];
  if (begin > end) fail(`data_offsets [${begin}, ${end}] end before they begin.`, name);
  if (end > dataLength) {
    fail(`data_offsets [${begin}, ${end}] run past the data section (${dataLength} bytes); the file is truncated or the header is wrong.`, name);
  }
  // Exact (BigInt) size: [2^32, 2^32, 0] is a valid empty tensor, [2^32, 2^32] is too big.
  const need = numelBig(shape) * BigInt(DTYPE_BYTES[dtype]);
  if (need !== BigInt(end - begin)) {
    fail(`data_offsets [${begin}, ${end}] hold ${end - begin} bytes but ${dtype} × [${shape.join(', ')}] needs ${need} bytes.`, name);
  }
  return { name, dtype, shape: [...shape], begin, end };
}

function checkCoverage(tensors: TensorInfo[], dataLength: number, fail: (msg: string, tensor?: string) => never): void {
  const sorted = [...tensors].sort((a, b) => a.begin - b.begin || a.end - b.end);
  let pos = 0;
  let prev: TensorInfo | undefined;
  for (const t of sorted) {
    if (t.begin < pos) fail(`bytes [${t.begin}, ${t.end}) overlap tensor ${JSON.stringify(prev!.name)} [${prev!.begin}, ${prev!.end}).`, t.name);
    if (t.begin > pos) {
      fail(
        `starts at byte ${t.begin} but the previous tensor${prev ? ` ${JSON.stringify(prev.name)}` : ''} ends at ${pos}: a gap of ${t.begin - pos} bytes; expected tensors to cover the data section contiguously.`,
        t.name,
      );
    }
    pos = t.end;
    prev = t;
  }
  if (pos !== dataLength) {
    fail(`data section is ${dataLength} bytes but the tensors cover only [0, ${pos}); ${dataLength - pos} trailing bytes are unaccounted for.`);
  }
}

/** `err` as a CheckpointFormatError naming `file` (an I/O error such as EIO or EISDIR keeps its code in the message). */
export function asFormatError(err: unknown, file: string, what: string): CheckpointFormatError {
  if (err instanceof CheckpointFormatError) return err;
  const code = (err as NodeJS.ErrnoException)?.code;
  return new CheckpointFormatError(`${file}: ${what} (${code ?? (err as Error)?.message ?? String(err)}).`, { file }, { cause: err });
}

/** Reads exactly `length` bytes at `position`, or fails naming the file (it shrank or lied about its size). */
async function readExactly(fh: FileHandle, buf: Uint8Array, position: number, file: string, what: string): Promise<void> {
  let done = 0;
  while (done < buf.length) {
    const { bytesRead } = await fh.read(buf, done, buf.length - done, position + done);
    if (bytesRead === 0) {
      throw new CheckpointFormatError(`${file}: ${what}: unexpected end of file after ${done} of ${buf.length} bytes (the file is truncated).`, { file });
    }
    done += bytesRead;
  }
}

/**
 * An open safetensors file. Tensors are read on demand, one `Uint8Array` each; the file is
 * never read whole. Close it when done.
 */
export class SafetensorsFile {
  private readonly byName: Map<string, TensorInfo>;
  private closed = false;

  private constructor(
    readonly path: string,
    private readonly fh: FileHandle,
    /** File size in bytes. */
    readonly size: number,
    /** Byte offset of the data section (8 + header length). */
    readonly dataStart: number,
    readonly metadata: Readonly<Record<string, string>>,
    /** In header order. */
    readonly tensors: readonly TensorInfo[],
  ) {
    this.byName = new Map(tensors.map((t) => [t.name, t]));
  }

  static async open(path: string): Promise<SafetensorsFile> {
    let fh: FileHandle;
    try {
      // Non-blocking open: a FIFO or device given as a shard is refused below instead of hanging here.
      fh = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
    } catch (err) {
      throw new CheckpointFormatError(
        `${path}: cannot open (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}).`,
        { file: path },
        { cause: err },
      );
    }
    try {
      const st = await fh.stat();
      if (!st.isFile()) {
        throw new CheckpointFormatError(`${path}: is ${st.isDirectory() ? 'a directory' : 'not a regular file'}; expected a .safetensors file.`, {
          file: path,
        });
      }
      const size = st.size;
      if (size < 8) {
        throw new CheckpointFormatError(
          `${path}: file is ${size} bytes; a safetensors file starts with an 8-byte header length. The file is truncated or not safetensors.`,
          { file: path },
        );
      }
      const lenBuf = new Uint8Array(8);
      await readExactly(fh, lenBuf, 0, path, 'header length');
      const n = new DataView(lenBuf.buffer).getBigUint64(0, true);
      if (n > BigInt(MAX_HEADER_BYTES)) {
        throw new CheckpointFormatError(`${path}: header length ${n} exceeds the ${MAX_HEADER_BYTES}-byte limit; the file is corrupt or not safetensors.`, {
          file: path,
        });
      }
      const headerLength = Number(n);
      if (headerLength > size - 8) {
        throw new CheckpointFormatError(
          `${path}: header length ${headerLength} is larger than the ${size - 8} bytes after the length field; the file is truncated or not safetensors.`,
          { file: path },
        );
      }
      const header = new Uint8Array(headerLength);
      await readExactly(fh, header, 8, path, 'header');
      const dataStart = 8 + headerLength;
      const parsed = parseSafetensorsHeader(header, size - dataStart, path);
      return new SafetensorsFile(path, fh, size, dataStart, parsed.metadata, parsed.tensors);
    } catch (err) {
      await fh.close().catch(() => {});
      throw asFormatError(err, path, 'cannot read');
    }
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  info(name: string): TensorInfo {
    const t = this.byName.get(name);
    if (!t) {
      throw new InvalidArgumentError(
        `${this.path} has no tensor ${JSON.stringify(name)}; it holds ${this.tensors.length} tensors (e.g. ${this.tensors
          .slice(0, 3)
          .map((x) => JSON.stringify(x.name))
          .join(', ')}).`,
        { file: this.path, tensor: name },
      );
    }
    return t;
  }

  /** The raw little-endian bytes of one tensor, in a fresh buffer of exactly its size. */
  async read(name: string): Promise<Uint8Array> {
    const t = this.info(name);
    if (this.closed) throw new InvalidArgumentError(`${this.path} is closed; cannot read ${JSON.stringify(name)}.`, { file: this.path });
    const buf = new Uint8Array(t.end - t.begin);
    try {
      await readExactly(this.fh, buf, this.dataStart + t.begin, this.path, `tensor ${JSON.stringify(name)}`);
    } catch (err) {
      throw asFormatError(err, this.path, `cannot read tensor ${JSON.stringify(name)}`);
    }
    return buf;
  }

  /** Every tensor with its bytes, in file order (sequential reads), one at a time. */
  async *entries(): AsyncGenerator<[TensorInfo, Uint8Array]> {
    for (const t of [...this.tensors].sort((a, b) => a.begin - b.begin)) yield [t, await this.read(t.name)];
  }

  [Symbol.asyncIterator](): AsyncGenerator<[TensorInfo, Uint8Array]> {
    return this.entries();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.fh.close();
  }
}

/** One tensor to write. `data` may be a function so the writer pulls tensors one at a time. */
export interface TensorSource {
  name: string;
  dtype: SafetensorsDType;
  shape: readonly number[];
  data: Uint8Array | (() => Uint8Array | Promise<Uint8Array>);
}

export interface WriteOptions {
  metadata?: Record<string, string>;
}

/** Bytes a tensor of this dtype and shape occupies (validating both). */
export function tensorBytes(t: Pick<TensorSource, 'name' | 'dtype' | 'shape'>): number {
  if (!isSafetensorsDType(t.dtype)) {
    throw new InvalidArgumentError(
      `Expected one of ${SAFETENSORS_DTYPES.join(', ')} for the dtype of ${JSON.stringify(t.name)} but received ${describe(t.dtype)}.`,
      { tensor: t.name },
    );
  }
  if (!Array.isArray(t.shape) || !t.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    throw new InvalidArgumentError(
      `Expected a list of non-negative integers for the shape of ${JSON.stringify(t.name)} but received ${JSON.stringify(t.shape)}.`,
      { tensor: t.name },
    );
  }
  const bytes = numelBig(t.shape) * BigInt(DTYPE_BYTES[t.dtype]);
  if (bytes > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new InvalidArgumentError(`Shape [${t.shape.join(', ')}] of ${JSON.stringify(t.name)} is too large (${bytes} bytes).`, { tensor: t.name });
  }
  return Number(bytes);
}

/** The header bytes (JSON padded with spaces so the data section starts 8-byte aligned) for `tensors` in order. */
export function buildSafetensorsHeader(tensors: readonly Pick<TensorSource, 'name' | 'dtype' | 'shape'>[], metadata?: Record<string, string>): Uint8Array {
  // Null prototype: a tensor named "__proto__" is a key like any other, not a prototype change.
  const header = Object.create(null) as Record<string, unknown>;
  if (metadata && Object.keys(metadata).length) {
    for (const [k, v] of Object.entries(metadata)) {
      if (typeof v !== 'string') throw new InvalidArgumentError(`Expected a string for metadata ${JSON.stringify(k)} but received ${describe(v)}.`, { key: k });
    }
    header.__metadata__ = Object.assign(Object.create(null) as Record<string, string>, metadata);
  }
  const names = new Set<string>();
  let offset = 0;
  for (const t of tensors) {
    if (typeof t.name !== 'string' || t.name === '' || t.name === '__metadata__') {
      throw new InvalidArgumentError(`Expected a non-empty tensor name other than __metadata__ but received ${describe(t.name)}.`, { tensor: t.name });
    }
    if (names.has(t.name)) throw new InvalidArgumentError(`Tensor ${JSON.stringify(t.name)} is given twice; names must be unique.`, { tensor: t.name });
    names.add(t.name);
    const bytes = tensorBytes(t);
    header[t.name] = { dtype: t.dtype, shape: [...t.shape], data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  const json = new TextEncoder().encode(JSON.stringify(header));
  const padded = Math.ceil((8 + json.length) / 8) * 8 - 8;
  const out = new Uint8Array(padded).fill(0x20);
  out.set(json);
  return out;
}

/**
 * Writes `tensors` (in order) to `path` atomically: the bytes go to a temporary file in the
 * same folder, which is fsynced and then renamed over `path`. A crash or error at any point
 * leaves the previous `path` untouched (an error also removes the temporary file).
 */
export async function writeSafetensors(path: string, tensors: readonly TensorSource[], opts: WriteOptions = {}): Promise<{ bytes: number }> {
  const header = buildSafetensorsHeader(tensors, opts.metadata);
  return atomicWrite(path, async (fh) => {
    const len = new Uint8Array(8);
    new DataView(len.buffer).setBigUint64(0, BigInt(header.length), true);
    let pos = 0;
    pos += await writeAll(fh, len, pos);
    pos += await writeAll(fh, header, pos);
    for (const t of tensors) {
      const data = typeof t.data === 'function' ? await t.data() : t.data;
      const want = tensorBytes(t);
      if (!(data instanceof Uint8Array) || data.length !== want) {
        throw new InvalidArgumentError(
          `Tensor ${JSON.stringify(t.name)} (${t.dtype} × [${t.shape.join(', ')}]) needs ${want} bytes but its data is ${data instanceof Uint8Array ? `${data.length} bytes` : describe(data)}.`,
          { tensor: t.name },
        );
      }
      pos += await writeAll(fh, data, pos);
    }
    return { bytes: pos };
  });
}

async function writeAll(fh: FileHandle, data: Uint8Array, position: number): Promise<number> {
  let done = 0;
  while (done < data.length) {
    const { bytesWritten } = await fh.write(data, done, data.length - done, position + done);
    done += bytesWritten;
  }
  return data.length;
}

/**
 * Runs `fill` on a temporary file beside `path` (`.<name>.tmp-<pid>-<random>`), then fsyncs
 * and renames it over `path`. Every step goes through the file-ops seam.
 */
export async function atomicWrite<R>(path: string, fill: (fh: FileHandle) => Promise<R>): Promise<R> {
  const tmp = join(dirname(path), `${atomicTempPrefix(path)}${process.pid}-${randomBytes(4).toString('hex')}`);
  const fh = await createFile(tmp);
  let ok = false;
  try {
    beforeFileOp('write', tmp);
    const result = await fill(fh);
    await syncFile(fh, tmp);
    await fh.close();
    await renamePath(tmp, path);
    ok = true;
    await syncDir(dirname(path));
    return result;
  } finally {
    if (!ok) {
      await fh.close().catch(() => {});
      await unlink(tmp).catch(() => {});
    }
  }
}

/** Name prefix of atomicWrite's temporary files for `path` (a crash can leave one behind). */
export function atomicTempPrefix(path: string): string {
  return `.${basename(path)}.tmp-`;
}
