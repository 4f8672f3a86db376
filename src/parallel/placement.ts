/**
 * Placements of a tensor over one mesh dim, with torch's semantics:
 * - `Shard(dim)`: torch.chunk along `dim`: every chunk has ceil(size / parts)
 *   elements except the trailing ones, which are smaller or EMPTY (size 5 over 4
 *   ranks is [2, 2, 1, 0]; size 3 over 4 is [1, 1, 1, 0]). Inside collectives each
 *   shard is padded to the ceil size and unpadded after.
 * - `Replicate()`: every rank of the mesh dim holds the whole tensor.
 * - `Partial(op)`: every rank holds a partial value; the tensor is `op` over them.
 *
 * A list of placements has one entry per mesh dim; shards of the same tensor dim on
 * several mesh dims nest in mesh-dim order (torch's "left to right" rule).
 */
import type { ReduceOp } from '../runtime/comm/comm.js';
import { REDUCE_OPS } from '../runtime/comm/comm.js';
import { describe } from '../runtime/device/dtype.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import type { DeviceMesh } from './device-mesh.js';

export interface ShardPlacement {
  readonly kind: 'shard';
  readonly dim: number;
  /** Only read by the sharded loader: an empty local shard is accepted instead of being an error. */
  readonly allowEmpty: boolean;
}
export interface ReplicatePlacement {
  readonly kind: 'replicate';
}
export interface PartialPlacement {
  readonly kind: 'partial';
  readonly op: ReduceOp;
}
export type Placement = ShardPlacement | ReplicatePlacement | PartialPlacement;

export function Shard(dim: number, options?: { allowEmpty?: boolean }): ShardPlacement {
  if (typeof dim !== 'number' || !Number.isInteger(dim) || dim < -16 || dim >= 16) {
    throw new InvalidArgumentError(`Expected an integer tensor dim in [-16, 16) for Shard() but received ${describe(dim)}.`, { argument: 'dim' });
  }
  if (options !== undefined && (typeof options !== 'object' || options === null || Object.keys(options).some((k) => k !== 'allowEmpty'))) {
    throw new InvalidArgumentError(
      `Expected { allowEmpty?: boolean } for the options of Shard() but received ${describe(options)}${options && typeof options === 'object' ? ` with keys ${Object.keys(options).join(', ')}` : ''}.`,
    );
  }
  const allowEmpty = options?.allowEmpty ?? false;
  if (typeof allowEmpty !== 'boolean') throw new InvalidArgumentError(`Expected a boolean for allowEmpty of Shard() but received ${describe(allowEmpty)}.`);
  return Object.freeze({ kind: 'shard', dim, allowEmpty });
}

const REPLICATE: ReplicatePlacement = Object.freeze({ kind: 'replicate' });
export function Replicate(): ReplicatePlacement {
  return REPLICATE;
}

export function Partial(op: ReduceOp = 'sum'): PartialPlacement {
  if (!REDUCE_OPS.includes(op)) {
    throw new InvalidArgumentError(`Expected one of ${REDUCE_OPS.join(', ')} for Partial() but received ${describe(op)}.`, { argument: 'op' });
  }
  return Object.freeze({ kind: 'partial', op });
}

export function isPlacement(p: unknown): p is Placement {
  if (typeof p !== 'object' || p === null) return false;
  const k = (p as { kind?: unknown }).kind;
  return k === 'shard' || k === 'replicate' || k === 'partial';
}

/** "Shard(0)", "Replicate()", "Partial(sum)": the spelling a user types. */
export function formatPlacement(p: Placement): string {
  switch (p.kind) {
    case 'shard':
      return p.allowEmpty ? `Shard(${p.dim}, { allowEmpty: true })` : `Shard(${p.dim})`;
    case 'replicate':
      return 'Replicate()';
    case 'partial':
      return `Partial('${p.op}')`;
  }
}

export function formatPlacements(ps: readonly Placement[]): string {
  return `[${ps.map(formatPlacement).join(', ')}]`;
}

/** Equal as data layouts (allowEmpty, a loader option, is ignored). */
export function samePlacement(a: Placement, b: Placement): boolean {
  if (a.kind !== b.kind) return false;
  if (a.kind === 'shard') return a.dim === (b as ShardPlacement).dim;
  if (a.kind === 'partial') return a.op === (b as PartialPlacement).op;
  return true;
}

export function samePlacements(a: readonly Placement[], b: readonly Placement[]): boolean {
  return a.length === b.length && a.every((p, i) => samePlacement(p, b[i]!));
}

/** Validates a placement list against a mesh and a tensor rank; Shard dims come back non-negative. */
export function normalizePlacements(placements: unknown, meshNdim: number, tensorNdim: number, fn: string): Placement[] {
  if (!Array.isArray(placements) || !placements.every(isPlacement)) {
    throw new InvalidArgumentError(`${fn}: expected an array of placements (Shard(d), Replicate(), Partial(op)) but received ${describe(placements)}.`, {
      argument: 'placements',
    });
  }
  if (placements.length !== meshNdim) {
    throw new InvalidArgumentError(
      `${fn}: expected ${meshNdim} placement${meshNdim === 1 ? '' : 's'} (one per mesh dim) but received ${placements.length}: ${formatPlacements(placements)}.`,
      { argument: 'placements' },
    );
  }
  return placements.map((p) => {
    if (p.kind !== 'shard') return p;
    if (p.dim < -tensorNdim || p.dim >= tensorNdim) {
      throw new InvalidArgumentError(`${fn}: ${formatPlacement(p)} is out of range for a ${tensorNdim}-d tensor.`, { argument: 'placements' });
    }
    return p.dim < 0 ? Shard(p.dim + tensorNdim, { allowEmpty: p.allowEmpty }) : p;
  });
}

/** ceil(size / parts): the chunk size of torch.chunk (0 for an empty dim). */
export function chunkSize(size: number, parts: number): number {
  return size === 0 ? 0 : Math.ceil(size / parts);
}

/** [start, end) of chunk `index` of `size` elements split into `parts` with torch.chunk semantics. */
export function chunkRange(size: number, parts: number, index: number): [number, number] {
  for (const [v, what] of [
    [size, 'size'],
    [parts, 'parts'],
    [index, 'index'],
  ] as const) {
    if (!Number.isSafeInteger(v) || v < 0)
      throw new InvalidArgumentError(`chunkRange(): expected a non-negative integer for ${what} but received ${describe(v)}.`);
  }
  if (parts < 1 || index >= parts)
    throw new InvalidArgumentError(`chunkRange(): expected parts >= 1 and index in [0, parts) but received parts ${parts}, index ${index}.`);
  const c = chunkSize(size, parts);
  return [Math.min(index * c, size), Math.min((index + 1) * c, size)];
}

/** Local box (offset and size per tensor dim) of the mesh coordinate `coord` of a mesh of `meshShape`. */
export function localBox(
  global: readonly number[],
  placements: readonly Placement[],
  meshShape: readonly number[],
  coord: readonly number[],
): { offset: number[]; shape: number[] } {
  const offset = global.map(() => 0);
  const shape = [...global];
  placements.forEach((p, i) => {
    if (p.kind !== 'shard') return;
    const [s, e] = chunkRange(shape[p.dim]!, meshShape[i]!, coord[i]!);
    offset[p.dim]! += s;
    shape[p.dim] = e - s;
  });
  return { offset, shape };
}

/** Shape of this rank's local tensor for a tensor of shape `global` placed on `mesh`. */
export function localShape(global: readonly number[], placements: readonly Placement[], mesh: DeviceMesh): number[] {
  const ps = normalizePlacements(placements, mesh.ndim, global.length, 'localShape()');
  return localBox(global, ps, mesh.shape, mesh.coordinate).shape;
}
