/**
 * Loads safetensors parameters straight into local shards (DTensors) on a mesh.
 *
 * The design this guards (VeOmni FSDP2 loader, ByteDance-Seed/VeOmni PR #642): a
 * full tensor was moved to the NPU and then `copy_()`-ed into a sharded DTensor,
 * which (1) spiked device memory by a whole parameter and (2) ran an implicit
 * redistribute collective on some ranks only, hanging HCCL. Here:
 * - each rank slices its local box ON THE HOST and copies only that to the device;
 *   a full tensor never reaches the device (except where the placement is Replicate);
 * - the only collectives are explicit, issued by every rank in the same order:
 *   the manifest broadcast, one agreement all-gather, then per bucket a control
 *   broadcast and the bucket broadcast ('rank0-broadcast' mode only);
 * - every failure is agreed on before data moves: rank 0's open error is broadcast
 *   to every rank (CheckpointFormatError everywhere, no rank left waiting), a plan
 *   error (e.g. a dim too small for the mesh) is found on every rank, and a read
 *   error on rank 0 mid-load is broadcast in the next bucket's control message.
 *
 * Modes:
 * - 'rank0-broadcast' (default): rank 0 reads tensor by tensor and broadcasts the raw
 *   bytes over the mesh's parent communicator in buckets of at most `bucketBytes`
 *   (a tensor larger than a bucket is split over several). Peak device memory: the
 *   local shards plus one bucket.
 * - 'every-rank-reads': every rank reads the file itself; after the agreement step no
 *   communication at all. Peak device memory: the local shards.
 *
 * The host holds one full tensor at a time (the host is not the scarce memory here).
 */
import { basename } from 'node:path';
import { didYouMean } from '../runtime/device/options.js';
import type { Communicator } from '../runtime/comm/comm.js';
import { describe } from '../runtime/device/dtype.js';
import { AscentError, CheckpointFormatError, InvalidArgumentError, errorFromCode } from '../runtime/errors.js';
import type { Stream } from '../runtime/device/stream.js';
import { Tensor, numelOf } from '../runtime/device/tensor.js';
import { Checkpoint } from '../model/checkpoint.js';
import { DEVICE_DTYPE, safetensorsDTypeSize, type SafetensorsDType } from '../model/safetensors.js';
import { toFloat32 } from '../model/host-float.js';
import { DeviceMesh, coordinateOf } from './device-mesh.js';
import { DTensor } from './dtensor.js';
import { chunkRange, formatPlacement, formatPlacements, localBox, normalizePlacements, Replicate, type Placement } from './placement.js';

export const LOAD_MODES = ['rank0-broadcast', 'every-rank-reads'] as const;
export type LoadMode = (typeof LOAD_MODES)[number];

export const DEFAULT_BUCKET_BYTES = 32 * 1024 * 1024;

/** The checkpoint dtypes loadShardedHost() widens to fp32. */
const HOST_DTYPES: readonly SafetensorsDType[] = ['F32', 'BF16', 'F16'];

export interface ParamMeta {
  name: string;
  dtype: SafetensorsDType;
  shape: number[];
  /** The safetensors file that holds it (its base name). */
  file?: string;
}

export type PlacementPlan = Readonly<Record<string, readonly Placement[]>> | ((param: ParamMeta) => readonly Placement[] | undefined);

export interface ShardedLoadOptions {
  mesh: DeviceMesh;
  /** Placements per parameter name (a record, or a function); default Replicate() on every mesh dim. */
  placements?: PlacementPlan;
  /** Default 'rank0-broadcast'. Every rank must pass the same mode. */
  mode?: LoadMode;
  /** Largest broadcast in 'rank0-broadcast' mode (bytes, default 32 MiB). Every rank must pass the same value. */
  bucketBytes?: number;
  stream?: Stream;
  /**
   * Checks the whole manifest (names, dtypes, shapes) on every rank before any data moves;
   * what it throws stops every rank there, as a plan error does.
   */
  check?: (manifest: readonly ParamMeta[]) => void;
  /**
   * The tensors this rank keeps (default all). The others still pass through the
   * collective in 'rank0-broadcast' mode (every rank takes part in every bucket) but are
   * neither sliced nor stored; in 'every-rank-reads' mode they are not read.
   */
  select?: (param: ParamMeta) => boolean;
}

const OPTION_KEYS = ['mesh', 'placements', 'mode', 'bucketBytes', 'stream', 'check', 'select'];

type CheckedOptions = Required<Pick<ShardedLoadOptions, 'mesh' | 'mode' | 'bucketBytes'>> & ShardedLoadOptions;

function checkLoadOptions(path: unknown, options: unknown, fn: string): CheckedOptions {
  if (typeof path !== 'string' || path === '')
    throw new InvalidArgumentError(`${fn}: expected a checkpoint path but received ${describe(path)}.`, { argument: 'path' });
  if (typeof options !== 'object' || options === null)
    throw new InvalidArgumentError(`${fn}: expected options { mesh, placements?, mode?, bucketBytes? } but received ${describe(options)}.`);
  const unknown = Object.keys(options).find((k) => !OPTION_KEYS.includes(k));
  if (unknown)
    throw new InvalidArgumentError(`Unknown option '${unknown}' for ${fn}.${didYouMean(unknown, OPTION_KEYS)} Expected one of: ${OPTION_KEYS.join(', ')}.`, {
      option: unknown,
    });
  const o = options as ShardedLoadOptions;
  if (!(o.mesh instanceof DeviceMesh))
    throw new InvalidArgumentError(`${fn}: expected a DeviceMesh for mesh but received ${describe(o.mesh)}.`, { argument: 'mesh' });
  const mode = o.mode ?? 'rank0-broadcast';
  if (!LOAD_MODES.includes(mode))
    throw new InvalidArgumentError(`${fn}: expected mode ${LOAD_MODES.map((m) => `'${m}'`).join(' or ')} but received ${describe(mode)}.`, {
      argument: 'mode',
    });
  const bucketBytes = o.bucketBytes ?? DEFAULT_BUCKET_BYTES;
  if (typeof bucketBytes !== 'number' || !Number.isSafeInteger(bucketBytes) || bucketBytes < 4 || bucketBytes % 4 !== 0) {
    throw new InvalidArgumentError(`${fn}: expected bucketBytes to be a positive multiple of 4 but received ${describe(bucketBytes)}.`, {
      argument: 'bucketBytes',
    });
  }
  for (const k of ['check', 'select'] as const) {
    if (o[k] !== undefined && typeof o[k] !== 'function')
      throw new InvalidArgumentError(`${fn}: expected a function for ${k} but received ${describe(o[k])}.`, { argument: k });
  }
  const p = o.placements;
  if (p !== undefined && typeof p !== 'function' && (typeof p !== 'object' || p === null)) {
    throw new InvalidArgumentError(`${fn}: expected placements to be a record name -> placements or a function but received ${describe(p)}.`, {
      argument: 'placements',
    });
  }
  return { ...o, mode, bucketBytes };
}

/** Parameter name -> DTensor of its local shard, in checkpoint order. Collective over `mesh.parent`. */
export async function loadSharded(path: string, options: ShardedLoadOptions): Promise<Map<string, DTensor>> {
  const o = checkLoadOptions(path, options, 'loadSharded()');
  const stream = o.stream ?? o.mesh.device.defaultStream;
  const out = new Map<string, DTensor>();
  try {
    await loadEach(path, o, 'loadSharded()', false, (bytes, meta, placements) => out.set(meta.name, upload(bytes, meta, placements, o.mesh, stream)));
  } catch (e) {
    for (const t of out.values()) t.release();
    throw e;
  }
  return out;
}

/** One rank's piece of a checkpoint tensor, kept on the host and widened to fp32. */
export interface HostShard {
  /** The tensor's global shape. */
  shape: number[];
  /** The dtype the checkpoint stores it in. */
  dtype: SafetensorsDType;
  placements: Placement[];
  /** This rank's box of the global tensor (torch.chunk semantics per Shard). */
  box: { offset: number[]; shape: number[] };
  /** The box's values, row-major, fp32. */
  data: Float32Array;
}

/**
 * As loadSharded(), but each rank keeps its box on the host as fp32 (BF16 / F16 widened
 * exactly) instead of uploading it: for a strategy that lays its shards out itself (a
 * flat FSDP unit). Device memory used: one bucket ('rank0-broadcast') or none; host
 * memory: the local boxes plus one full tensor in flight. Only F32, BF16 and F16 tensors
 * load (any other dtype is refused on every rank before data moves). Collective.
 */
export async function loadShardedHost(path: string, options: ShardedLoadOptions): Promise<Map<string, HostShard>> {
  const o = checkLoadOptions(path, options, 'loadShardedHost()');
  const out = new Map<string, HostShard>();
  await loadEach(path, o, 'loadShardedHost()', true, (bytes, meta, placements) => {
    const box = localBox(meta.shape, placements, o.mesh.shape, o.mesh.coordinate);
    const local = sliceHost(bytes, meta.shape, safetensorsDTypeSize(meta.dtype), box);
    out.set(meta.name, { shape: [...meta.shape], dtype: meta.dtype, placements, box, data: toFloat32(local, meta.dtype, { file: path, tensor: meta.name }) });
  });
  return out;
}

type OnTensor = (bytes: Uint8Array, meta: ParamMeta, placements: Placement[]) => void;

/** The collective part both loaders share: manifest, plan, agreement, then every tensor's full bytes to `onTensor`. */
async function loadEach(path: string, o: CheckedOptions, fn: string, toHost: boolean, onTensor: OnTensor): Promise<void> {
  const comm = o.mesh.parent;
  const stream = o.stream ?? o.mesh.device.defaultStream;
  const root = comm.rank === 0;

  // 1. The manifest: read by rank 0 and broadcast, or by every rank.
  let ckpt: Checkpoint | undefined;
  let manifest: ParamMeta[] | undefined;
  let localError: Error | undefined;
  if (root || o.mode === 'every-rank-reads') {
    try {
      ckpt = await Checkpoint.open(path);
      manifest = ckpt.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, file: basename(t.file) }));
    } catch (e) {
      localError = e as Error;
    }
  }
  try {
    if (o.mode === 'rank0-broadcast') {
      // Rank 0's open error reaches every rank through the agreement below.
      const m = await broadcastJson(comm, stream, root ? { manifest: localError ? null : manifest } : undefined);
      manifest = (m.manifest ?? undefined) as ParamMeta[] | undefined;
    }
    // 2. Plan every tensor (same on every rank), then agree that every rank can go on.
    let plan: Array<{ meta: ParamMeta; placements: Placement[] }> = [];
    if (!localError && manifest) {
      try {
        o.check?.(manifest!);
        plan = planLoad(manifest!, o.placements, o.mesh, path, fn, toHost);
      } catch (e) {
        localError = e as Error;
      }
    }
    await agree(comm, stream, localError, o.mode === 'every-rank-reads' ? 'open and plan the checkpoint' : 'plan the load', fn);

    // 3. Data.
    const keep = o.select ?? (() => true);
    if (o.mode === 'every-rank-reads') {
      for (const { meta, placements } of plan) if (keep(meta)) onTensor(await ckpt!.read(meta.name), meta, placements);
    } else {
      await broadcastBuckets(comm, stream, ckpt, plan, o.bucketBytes, (bytes, meta, placements) => keep(meta) && onTensor(bytes, meta, placements), fn);
    }
  } finally {
    await ckpt?.close();
  }
}

function planLoad(
  manifest: ParamMeta[],
  plan: PlacementPlan | undefined,
  mesh: DeviceMesh,
  path: string,
  fn: string,
  toHost: boolean,
): Array<{ meta: ParamMeta; placements: Placement[] }> {
  if (plan !== undefined && typeof plan !== 'function') {
    const names = new Set(manifest.map((m) => m.name));
    const missing = Object.keys(plan).filter((k) => !names.has(k));
    if (missing.length) {
      throw new InvalidArgumentError(
        `${fn}: placements name ${missing.map((k) => JSON.stringify(k)).join(', ')}, which ${missing.length === 1 ? 'is' : 'are'} not in ${path} (it holds ${manifest.length} tensors, e.g. ${manifest
          .slice(0, 3)
          .map((m) => JSON.stringify(m.name))
          .join(', ')}).`,
        { missing },
      );
    }
  }
  return manifest.map((meta) => {
    if (toHost && !HOST_DTYPES.includes(meta.dtype)) {
      throw new CheckpointFormatError(
        `${path}: tensor ${JSON.stringify(meta.name)} is ${meta.dtype}; ${fn} widens F32, BF16 and F16 tensors to fp32 only. HINT: convert the checkpoint's floating-point weights to one of these.`,
        { file: path, tensor: meta.name, dtype: meta.dtype },
      );
    }
    if (DEVICE_DTYPE[meta.dtype] === undefined) {
      throw new CheckpointFormatError(
        `${path}: tensor ${JSON.stringify(meta.name)} is ${meta.dtype}, which the device has no dtype for (supported: ${Object.keys(DEVICE_DTYPE).join(', ')}).`,
        { file: path, tensor: meta.name },
      );
    }
    const given = typeof plan === 'function' ? plan({ ...meta, shape: [...meta.shape] }) : plan?.[meta.name];
    const placements = normalizePlacements(
      given ?? mesh.shape.map(() => Replicate()),
      mesh.ndim,
      meta.shape.length,
      `${fn} placements of ${JSON.stringify(meta.name)}`,
    );
    const partial = placements.find((p) => p.kind === 'partial');
    if (partial) {
      throw new InvalidArgumentError(
        `${fn}: parameter ${JSON.stringify(meta.name)} is planned as ${formatPlacements(placements)}, but a checkpoint holds full values; load it as Replicate() or Shard(d).`,
        { tensor: meta.name },
      );
    }
    checkNoEmptyShard(meta, placements, mesh, fn);
    return { meta, placements };
  });
}

/**
 * A Shard that gives some mesh coordinate an empty piece of a non-empty dim is an
 * error (naming the parameter, the dim and both sizes) unless it allows empty shards.
 * Checked over every coordinate, so every rank reaches the same verdict.
 */
function checkNoEmptyShard(meta: ParamMeta, placements: Placement[], mesh: DeviceMesh, fn: string): void {
  for (let r = 0; r < mesh.size(); r++) {
    const coord = coordinateOf(r, mesh.shape);
    const size = [...meta.shape];
    for (let i = 0; i < placements.length; i++) {
      const p = placements[i]!;
      if (p.kind !== 'shard') continue;
      const level = size[p.dim]!;
      const n = mesh.shape[i]!;
      const [s, e] = chunkRange(level, n, coord[i]!);
      if (e === s && level > 0 && !p.allowEmpty) {
        const chunks = Array.from({ length: n }, (_, q) => chunkRange(level, n, q)).map(([a, b]) => b - a);
        throw new InvalidArgumentError(
          `${fn}: parameter ${JSON.stringify(meta.name)} (shape [${meta.shape.join(', ')}]): ${formatPlacement(p)} on mesh dim '${mesh.names[i]}' splits dim ${p.dim} of size ${level} over ${n} ranks as [${chunks.join(', ')}] (torch.chunk), so coordinate ${coord[i]} of '${mesh.names[i]}' would get an empty shard${level < n ? ` (dim ${p.dim} has size ${level}, smaller than the ${n} ranks of '${mesh.names[i]}')` : ''}. HINT: shard another dim, use Replicate(), or pass Shard(${p.dim}, { allowEmpty: true }) if empty shards are intended.`,
          { tensor: meta.name, dim: p.dim, dimSize: level, meshDim: mesh.names[i], meshDimSize: n },
        );
      }
      size[p.dim] = e - s;
    }
  }
}

/** This rank's box of a tensor's raw bytes, sliced on the host, then copied to the device. */
function upload(bytes: Uint8Array, meta: ParamMeta, placements: Placement[], mesh: DeviceMesh, stream: Stream): DTensor {
  const elem = safetensorsDTypeSize(meta.dtype);
  const box = localBox(meta.shape, placements, mesh.shape, mesh.coordinate);
  const local = sliceHost(bytes, meta.shape, elem, box);
  const dtype = DEVICE_DTYPE[meta.dtype]!;
  const n = numelOf(box.shape);
  const buf = local.buffer.slice(local.byteOffset, local.byteOffset + local.byteLength);
  const host =
    dtype === 'fp32'
      ? new Float32Array(buf, 0, n)
      : dtype === 'int32'
        ? new Int32Array(buf, 0, n)
        : dtype === 'int64'
          ? new BigInt64Array(buf, 0, n)
          : dtype === 'uint8'
            ? new Uint8Array(buf, 0, n)
            : new Uint16Array(buf, 0, n);
  const t = Tensor.fromArray(mesh.device, host, box.shape, { dtype, stream });
  return DTensor.fromLocal(t, mesh, placements, { shape: meta.shape });
}

/** Bytes of the box {offset, shape} of a row-major tensor of `shape` (elements of `elem` bytes). */
export function sliceHost(bytes: Uint8Array, shape: readonly number[], elem: number, box: { offset: readonly number[]; shape: readonly number[] }): Uint8Array {
  const nd = shape.length;
  const out = new Uint8Array(numelOf(box.shape) * elem);
  if (out.length === 0) return out;
  // Innermost run: the trailing dims the box covers whole, plus the first partial one.
  let k = nd;
  let run = elem;
  while (k > 0 && box.shape[k - 1] === shape[k - 1] && box.offset[k - 1] === 0) run *= shape[--k]!;
  if (k > 0) run *= box.shape[--k]!;
  const strides = new Array<number>(nd);
  let s = elem;
  for (let d = nd - 1; d >= 0; d--) {
    strides[d] = s;
    s *= shape[d]!;
  }
  const idx = new Array<number>(k).fill(0);
  const base = box.offset.reduce((a, o, d) => a + o * strides[d]!, 0);
  for (let pos = 0; pos < out.length; pos += run) {
    let src = base;
    for (let d = 0; d < k; d++) src += idx[d]! * strides[d]!;
    out.set(bytes.subarray(src, src + run), pos);
    for (let d = k - 1; d >= 0; d--) {
      if (++idx[d]! < box.shape[d]!) break;
      idx[d] = 0;
    }
  }
  return out;
}

// ------------------------------------------------------------------ wire helpers (collective)

interface WireError {
  code: string;
  message: string;
  details: Record<string, unknown>;
}

function wireError(e: Error): WireError {
  return { code: e instanceof AscentError ? e.code : 'ASCENT_ERROR', message: e.message, details: e instanceof AscentError ? e.details : {} };
}

function fromWire(w: WireError, note: string): AscentError {
  return errorFromCode(w.code, `${w.message} (${note})`, w.details);
}

/** Root broadcasts a JSON value (length, then the UTF-8 bytes as int32 words); every rank returns it. */
async function broadcastJson(comm: Communicator, stream: Stream, value: unknown): Promise<Record<string, unknown>> {
  const root = comm.rank === 0;
  const bytes = root ? new TextEncoder().encode(JSON.stringify(value)) : new Uint8Array(0);
  const len = Tensor.fromArray(comm.device, Int32Array.from([bytes.length]), [1], { stream });
  let n: number;
  try {
    await comm.broadcast(len, len, 0, stream);
    n = (await len.toArray({ stream }))[0] as number;
  } finally {
    len.release();
  }
  const words = Math.ceil(n / 4);
  const padded = new Uint8Array(words * 4);
  if (root) padded.set(bytes);
  const t = Tensor.fromArray(comm.device, new Int32Array(padded.buffer), [words], { stream });
  try {
    await comm.broadcast(t, t, 0, stream);
    const got = root ? bytes : (await t.toBytes({ stream })).subarray(0, n);
    return JSON.parse(new TextDecoder().decode(got)) as Record<string, unknown>;
  } finally {
    t.release();
  }
}

/**
 * Every rank says whether it failed (one all-gather); if any did, every rank throws:
 * its own error, rank 0's (broadcast to all when rank 0 is among the failed, since it
 * is the one that read the file), or one naming the failed ranks.
 */
async function agree(comm: Communicator, stream: Stream, localError: Error | undefined, what: string, fn = 'loadSharded()'): Promise<void> {
  const flag = Tensor.fromArray(comm.device, Int32Array.from([localError ? 1 : 0]), [1], { stream });
  const all = Tensor.empty(comm.device, [comm.size], 'int32');
  let flags: number[];
  try {
    await comm.allGather(flag, all, stream);
    flags = Array.from((await all.toArray({ stream })) as Int32Array);
  } finally {
    flag.release();
    all.release();
  }
  const failed = flags.flatMap((f, r) => (f ? [r] : []));
  if (failed.length === 0) return;
  let rootError: WireError | undefined;
  if (failed[0] === 0) {
    const m = await broadcastJson(comm, stream, comm.rank === 0 ? { error: wireError(localError!) } : undefined);
    rootError = m.error as WireError;
  }
  if (localError) throw localError;
  if (rootError) throw fromWire(rootError, 'rank 0 read the checkpoint and broadcast this error');
  throw new InvalidArgumentError(
    `${fn}: rank${failed.length === 1 ? '' : 's'} ${failed.join(', ')} could not ${what}; every rank stops here (see rank ${failed[0]}'s error).`,
    { failedRanks: failed },
  );
}

/**
 * Rank 0 streams every tensor's bytes in buckets of at most `bucketBytes`. Before
 * each bucket (and once after the last) every rank reports whether its previous
 * step failed (a read on rank 0, a slice or upload anywhere): a failure stops every
 * rank there instead of leaving the others waiting in the next broadcast.
 */
async function broadcastBuckets(
  comm: Communicator,
  stream: Stream,
  ckpt: Checkpoint | undefined,
  plan: Array<{ meta: ParamMeta; placements: Placement[] }>,
  bucketBytes: number,
  onTensor: OnTensor,
  fn: string,
): Promise<void> {
  const root = comm.rank === 0;
  // Pieces [tensor, start, len) packed greedily into buckets; the same on every rank.
  // Each piece starts 4-byte aligned in its bucket (broadcast moves int32 words).
  type Piece = { t: number; start: number; len: number };
  const buckets: Piece[][] = [[]];
  let fill = 0;
  plan.forEach(({ meta }, t) => {
    const size = numelOf(meta.shape) * safetensorsDTypeSize(meta.dtype);
    let start = 0;
    do {
      if (fill === bucketBytes) {
        buckets.push([]);
        fill = 0;
      }
      const len = Math.min(size - start, bucketBytes - fill);
      buckets[buckets.length - 1]!.push({ t, start, len });
      fill += Math.ceil(len / 4) * 4;
      start += len;
    } while (start < size);
  });
  const sizeOf = (t: number) => numelOf(plan[t]!.meta.shape) * safetensorsDTypeSize(plan[t]!.meta.dtype);
  // Tensors being assembled on the host (whole; at most one spans buckets).
  const assembling = new Map<number, Uint8Array>();
  let localError: Error | undefined;
  for (const bucket of buckets) {
    if (bucket.length === 0) continue;
    const used = bucket.reduce((a, p) => a + Math.ceil(p.len / 4) * 4, 0);
    let host: Uint8Array | undefined;
    if (root && !localError) {
      try {
        host = new Uint8Array(used);
        let pos = 0;
        for (const p of bucket) {
          if (p.start === 0) assembling.set(p.t, await ckpt!.read(plan[p.t]!.meta.name));
          host.set(assembling.get(p.t)!.subarray(p.start, p.start + p.len), pos);
          pos += Math.ceil(p.len / 4) * 4;
        }
      } catch (e) {
        localError = e as Error;
      }
    }
    await agree(comm, stream, localError, 'read or load its part of the checkpoint', fn);
    const words = used / 4;
    const dev = root ? Tensor.fromArray(comm.device, new Int32Array(host!.buffer, 0, words), [words], { stream }) : Tensor.empty(comm.device, [words], 'int32');
    let bytes: Uint8Array;
    try {
      await comm.broadcast(dev, dev, 0, stream);
      bytes = root ? host! : await dev.toBytes({ stream });
    } finally {
      dev.release();
    }
    try {
      let pos = 0;
      for (const p of bucket) {
        if (!root) {
          if (p.start === 0) assembling.set(p.t, new Uint8Array(sizeOf(p.t)));
          assembling.get(p.t)!.set(bytes.subarray(pos, pos + p.len), p.start);
        }
        pos += Math.ceil(p.len / 4) * 4;
        if (p.start + p.len === sizeOf(p.t)) {
          const { meta, placements } = plan[p.t]!;
          const full = assembling.get(p.t)!;
          assembling.delete(p.t);
          onTensor(full, meta, placements);
        }
      }
    } catch (e) {
      localError = e as Error;
    }
  }
  await agree(comm, stream, localError, 'read or load its part of the checkpoint', fn);
}
