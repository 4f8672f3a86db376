/**
 * A DeviceMesh lays the ranks of a communicator out as an n-d grid with named dims
 * (`dp`, `tp`, `ep`, ...), row-major like torch's init_device_mesh: for shape
 * [2, 4] rank r sits at [floor(r / 4), r % 4]. Each dim gets its own communicator
 * (made with `comm.split`) over the ranks that share every other coordinate, ordered
 * by the coordinate along that dim, so `mesh.comm('tp').rank === mesh.coordinate[1]`.
 *
 * `DeviceMesh.create` is collective over `comm`: every rank must call it with the
 * same shape and names (it splits once per dim, in dim order). Bad arguments throw
 * InvalidArgumentError synchronously on the calling rank, before any split, so a
 * rank that passes a wrong shape fails at once instead of leaving its peers waiting
 * (they time out in the split with a CollectiveTimeoutError naming it).
 */
import { didYouMean } from '../runtime/device/options.js';
import { Communicator, type SplitOptions } from '../runtime/comm/comm.js';
import { describe } from '../runtime/device/dtype.js';
import { InvalidArgumentError } from '../runtime/errors.js';

export interface DeviceMeshOptions {
  /** Ranks per mesh dim; the product must equal the communicator's size. */
  shape: readonly number[];
  /** One unique name per dim, e.g. ['dp', 'tp']. */
  names: readonly string[];
  /** Settings of the per-dim communicators (default: the parent's). */
  split?: SplitOptions;
}

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Validates the options (no communication); returns the shape and names. */
function checkMeshOptions(comm: unknown, options: unknown): { shape: number[]; names: string[] } {
  if (!(comm instanceof Communicator)) {
    throw new InvalidArgumentError(`DeviceMesh.create(): expected a Communicator (e.g. ctx.comm) but received ${describe(comm)}.`, { argument: 'comm' });
  }
  if (typeof options !== 'object' || options === null) {
    throw new InvalidArgumentError(`DeviceMesh.create(): expected { shape, names } but received ${describe(options)}.`);
  }
  const unknown = Object.keys(options).filter((k) => !['shape', 'names', 'split'].includes(k));
  if (unknown.length)
    throw new InvalidArgumentError(
      `Unknown option '${unknown[0]}' for DeviceMesh.create().${didYouMean(unknown[0]!, ['shape', 'names', 'split'])} Expected one of: shape, names, split.`,
      { option: unknown[0] },
    );
  const { shape, names } = options as DeviceMeshOptions;
  if (!Array.isArray(shape) || shape.length === 0 || shape.some((d) => typeof d !== 'number' || !Number.isInteger(d) || d < 1)) {
    throw new InvalidArgumentError(
      `DeviceMesh.create(): expected shape to be a non-empty array of positive integers but received ${Array.isArray(shape) ? `[${shape.join(', ')}]` : describe(shape)}.`,
      { argument: 'shape' },
    );
  }
  if (!Array.isArray(names) || names.length !== shape.length) {
    throw new InvalidArgumentError(
      `DeviceMesh.create(): expected ${shape.length} dim name${shape.length === 1 ? '' : 's'} (one per entry of shape [${shape.join(', ')}]) but received ${Array.isArray(names) ? `[${names.map((n) => JSON.stringify(n)).join(', ')}]` : describe(names)}.`,
      { argument: 'names' },
    );
  }
  names.forEach((n, i) => {
    if (typeof n !== 'string' || !NAME.test(n)) {
      throw new InvalidArgumentError(`DeviceMesh.create(): expected dim name ${i} to be an identifier like 'dp' or 'tp' but received ${describe(n)}.`, {
        argument: 'names',
      });
    }
    if (names.indexOf(n) !== i) {
      throw new InvalidArgumentError(
        `DeviceMesh.create(): dim name '${n}' is given twice in [${names.map((x) => `'${x}'`).join(', ')}]; expected unique names.`,
        { argument: 'names', name: n },
      );
    }
  });
  const product = shape.reduce((a, b) => a * b, 1);
  if (product !== comm.size) {
    throw new InvalidArgumentError(
      `DeviceMesh.create(): mesh shape [${shape.join(', ')}] holds ${product} ranks but the communicator has ${comm.size}. HINT: the product of the shape must equal the world size (launch --nproc ${product}, or a shape whose product is ${comm.size}).`,
      { shape: [...shape], product, worldSize: comm.size },
    );
  }
  return { shape: [...shape], names: [...names] };
}

export class DeviceMesh {
  /** The communicator the mesh was made from (e.g. the world). */
  readonly parent: Communicator;
  readonly shape: readonly number[];
  readonly names: readonly string[];
  /** This rank's index along each mesh dim. */
  readonly coordinate: readonly number[];
  readonly #comms: readonly Communicator[];

  private constructor(parent: Communicator, shape: number[], names: string[], coordinate: number[], comms: Communicator[]) {
    this.parent = parent;
    this.shape = Object.freeze(shape);
    this.names = Object.freeze(names);
    this.coordinate = Object.freeze(coordinate);
    this.#comms = Object.freeze(comms);
  }

  /** Collective over `comm` (every rank, same options): one `comm.split` per mesh dim, in dim order. */
  static async create(comm: Communicator, options: DeviceMeshOptions): Promise<DeviceMesh> {
    const { shape, names } = checkMeshOptions(comm, options);
    const coordinate = coordinateOf(comm.rank, shape);
    const comms: Communicator[] = [];
    try {
      for (let i = 0; i < shape.length; i++) {
        // Color: the row-major index of the other coordinates; key: this dim's coordinate.
        let color = 0;
        for (let j = 0; j < shape.length; j++) if (j !== i) color = color * shape[j]! + coordinate[j]!;
        const sub = await comm.split(color, coordinate[i]!, options.split);
        if (sub === null || sub.size !== shape[i] || sub.rank !== coordinate[i]) {
          throw new InvalidArgumentError(
            `DeviceMesh.create(): the split for dim '${names[i]}' gave ${sub ? `rank ${sub.rank} of ${sub.size}` : 'no communicator'} but expected rank ${coordinate[i]} of ${shape[i]}.`,
          );
        }
        comms.push(sub);
      }
    } catch (e) {
      for (const c of comms) c.destroy();
      throw e;
    }
    return new DeviceMesh(comm, shape, names, coordinate, comms);
  }

  get ndim(): number {
    return this.shape.length;
  }

  /** Rank in the parent communicator. */
  get rank(): number {
    return this.parent.rank;
  }

  get device() {
    return this.parent.device;
  }

  /** Index of a dim given by name or index; unknown names are an error listing the names. */
  dimIndex(dim: string | number): number {
    if (typeof dim === 'number' && Number.isInteger(dim) && dim >= 0 && dim < this.ndim) return dim;
    const i = typeof dim === 'string' ? this.names.indexOf(dim) : -1;
    if (i < 0) {
      throw new InvalidArgumentError(
        `Unknown mesh dim ${typeof dim === 'string' ? `'${dim}'` : describe(dim)}; this mesh has dims [${this.names.map((n) => `'${n}'`).join(', ')}] (or indices 0..${this.ndim - 1}).`,
        { dim: String(dim), names: [...this.names] },
      );
    }
    return i;
  }

  /** The communicator of one mesh dim: the ranks that share every other coordinate. */
  comm(dim: string | number): Communicator {
    return this.#comms[this.dimIndex(dim)]!;
  }

  /** Number of ranks along a mesh dim. */
  size(dim?: string | number): number {
    if (dim === undefined) return this.shape.reduce((a, b) => a * b, 1);
    return this.shape[this.dimIndex(dim)]!;
  }

  /** Parent rank at a mesh coordinate (row-major). */
  rankAt(coordinate: readonly number[]): number {
    if (!Array.isArray(coordinate) || coordinate.length !== this.ndim || coordinate.some((c, i) => !Number.isInteger(c) || c < 0 || c >= this.shape[i]!)) {
      throw new InvalidArgumentError(`Expected a coordinate of ${this.ndim} indices within [${this.shape.join(', ')}] but received ${describe(coordinate)}.`);
    }
    return coordinate.reduce((r, c, i) => r * this.shape[i]! + c, 0);
  }

  /** Destroys the per-dim communicators (local; the parent stays). */
  destroy(): void {
    for (const c of this.#comms) c.destroy();
  }

  toString(): string {
    return `DeviceMesh(${this.names.map((n, i) => `${n}=${this.shape[i]}`).join(', ')}; rank ${this.rank} at [${this.coordinate.join(', ')}])`;
  }
}

/** Row-major coordinate of `rank` in a grid of `shape`. */
export function coordinateOf(rank: number, shape: readonly number[]): number[] {
  const c = new Array<number>(shape.length);
  let r = rank;
  for (let i = shape.length - 1; i >= 0; i--) {
    c[i] = r % shape[i]!;
    r = Math.floor(r / shape[i]!);
  }
  return c;
}
