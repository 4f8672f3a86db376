/**
 * The per-rank context handed to an SPMD `main(ctx)` and to every actor's
 * constructor: who this rank is, its device, a logger, and the actor API for
 * reaching actors on other ranks.
 */
import * as Comlink from 'comlink';
import { ActorMesh } from './actor-mesh.js';
import { ActorRef, RankLiveness, type CallOpts } from './actor-ref.js';
import type { Communicator } from '../comm/comm.js';
import type { Device } from '../device/device.js';
import { InvalidArgumentError, TimeoutError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { BrokerApi } from './rank-protocol.js';

export interface RankActors {
  /** Makes `obj` reachable from other ranks as actor `name` on this rank. */
  expose(name: string, obj: object): void;
  /**
   * Takes actor `name` off this rank, so that the name can be exposed again (a driver run
   * twice in the same world exposes its actors again). Refs connected before keep reaching
   * the old object; a later `get`/`mesh` waits for the next object exposed under that name.
   */
  unexpose(name: string): void;
  /** A ref to actor `name` on `rank`; waits (bounded by `timeoutMs`, default 60 s) until that rank exposes it. */
  get<T>(rank: number, name: string, opts?: CallOpts & { connectTimeoutMs?: number }): Promise<ActorRef<T>>;
  /** A mesh over actor `name` on `ranks` (default all ranks). */
  mesh<T>(name: string, ranks?: number[], opts?: CallOpts & { connectTimeoutMs?: number }): Promise<ActorMesh<T>>;
  /** Names of the actors exposed on this rank. */
  localNames(): string[];
}

export interface RankContext {
  readonly rank: number;
  readonly worldSize: number;
  readonly localRank: number;
  readonly localWorldSize: number;
  /** Rank 0 (nanoGPT's `master_process`). */
  readonly isLeader: boolean;
  /** This rank's device (ordinal = local rank). */
  readonly device: Device;
  /** The world communicator (all ranks, in rank order); sub-communicators come from `comm.split()`. */
  readonly comm: Communicator;
  readonly log: Logger;
  /** Arguments after the entry file on the `launch` command line. */
  readonly args: readonly string[];
  /** Aborted when the world stops this rank (failure elsewhere, shutdown, signal). */
  readonly signal: AbortSignal;
  readonly actors: RankActors;
  /** Runs `fn` when the rank is asked to stop (before it is terminated). */
  onStop(fn: (reason: string) => void | Promise<void>): void;
}

const DEFAULT_CONNECT_TIMEOUT_MS = 60_000;

/** Actor table and peer connections of one rank. */
export class RankActorTable implements RankActors {
  private readonly local = new Map<string, object>();
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly liveness = new Map<number, RankLiveness>();

  constructor(
    private readonly rank: number,
    private readonly worldSize: number,
    private readonly broker: Comlink.Remote<BrokerApi>,
    private readonly defaultCallTimeoutMs: number,
  ) {}

  expose(name: string, obj: object): void {
    if (typeof name !== 'string' || !name) throw new InvalidArgumentError(`Expected a non-empty actor name but received ${JSON.stringify(name)}`);
    if (obj === null || (typeof obj !== 'object' && typeof obj !== 'function')) {
      throw new InvalidArgumentError(`Expected an object for actor ${JSON.stringify(name)} but received ${obj === null ? 'null' : typeof obj}`);
    }
    if (this.local.has(name)) {
      throw new InvalidArgumentError(
        `An actor named ${JSON.stringify(name)} is already exposed on rank ${this.rank}. HINT: give each actor on a rank its own name.`,
      );
    }
    this.local.set(name, obj);
    const ws = this.waiters.get(name);
    this.waiters.delete(name);
    ws?.forEach((w) => w());
  }

  unexpose(name: string): void {
    if (!this.local.delete(name)) {
      throw new InvalidArgumentError(
        `No actor named ${JSON.stringify(name)} is exposed on rank ${this.rank} (exposed here: [${this.localNames().join(', ')}]). HINT: unexpose only a name this rank exposed, once.`,
        { rank: this.rank, name, exposed: this.localNames() },
      );
    }
  }

  localNames(): string[] {
    return [...this.local.keys()];
  }

  /** Waits until `name` is exposed here; used when a peer connects early. */
  async lookup(name: string, timeoutMs: number): Promise<object> {
    const found = this.local.get(name);
    if (found) return found;
    return new Promise<object>((resolve, reject) => {
      const set = this.waiters.get(name) ?? new Set();
      this.waiters.set(name, set);
      const onExposed = () => {
        clearTimeout(timer);
        resolve(this.local.get(name)!);
      };
      const timer = setTimeout(() => {
        set.delete(onExposed);
        reject(
          new TimeoutError(
            `No actor named ${JSON.stringify(name)} was exposed on rank ${this.rank} within ${timeoutMs} ms (exposed here: [${this.localNames().join(', ')}]). HINT: call ctx.actors.expose(${JSON.stringify(name)}, obj) on rank ${this.rank}, or check the name.`,
            { rank: this.rank, name, exposed: this.localNames(), timeoutMs },
          ),
        );
      }, timeoutMs);
      set.add(onExposed);
    });
  }

  livenessOf(rank: number): RankLiveness {
    let l = this.liveness.get(rank);
    if (!l) {
      l = new RankLiveness(rank);
      this.liveness.set(rank, l);
    }
    return l;
  }

  async get<T>(rank: number, name: string, opts: CallOpts & { connectTimeoutMs?: number } = {}): Promise<ActorRef<T>> {
    if (!Number.isInteger(rank) || rank < 0 || rank >= this.worldSize) {
      throw new InvalidArgumentError(`Expected a rank in [0, ${this.worldSize}) but received ${rank}`, { rank, worldSize: this.worldSize });
    }
    const l = this.livenessOf(rank);
    if (l.dead) throw l.dead;
    const { connectTimeoutMs = DEFAULT_CONNECT_TIMEOUT_MS, ...callOpts } = opts;
    const port = await this.broker.connect(this.rank, rank, name, connectTimeoutMs);
    return new ActorRef<T>(port as unknown as MessagePort, rank, name, l, { timeoutMs: this.defaultCallTimeoutMs, ...callOpts });
  }

  async mesh<T>(name: string, ranks?: number[], opts: CallOpts & { connectTimeoutMs?: number } = {}): Promise<ActorMesh<T>> {
    const rs = ranks ?? Array.from({ length: this.worldSize }, (_, i) => i);
    const refs = await Promise.all(rs.map((r) => this.get<T>(r, name, opts)));
    return new ActorMesh<T>(name, refs, (err, r, actor, method) => {
      process.stderr.write(`broadcast ${actor}.${method} failed on rank ${r}: ${err.stack ?? err.message}\n`);
    });
  }

  peerDied(rank: number, reason: string): void {
    this.livenessOf(rank).markDead(reason);
  }
}
