/**
 * `ActorMesh<T>`: the same actor on several ranks, with named fan-out adverbs
 * (Monarch style): `call` (every rank, per-rank results in rank order),
 * `callOne(rank)`, and `broadcast` (every rank, no reply awaited).
 */
import type { ActorRef, CallOpts, MethodArgs, MethodName, MethodResult } from './actor-ref.js';
import { InvalidArgumentError } from '../errors.js';

export type BroadcastErrorHandler = (err: Error, rank: number, actor: string, method: string) => void;

export class ActorMesh<T = unknown> {
  private readonly byRank = new Map<number, ActorRef<T>>();

  constructor(
    readonly actor: string,
    readonly refs: readonly ActorRef<T>[],
    private readonly onBroadcastError: BroadcastErrorHandler,
  ) {
    for (const r of refs) this.byRank.set(r.rank, r);
  }

  /** Ranks this mesh spans, ascending. */
  get ranks(): number[] {
    return this.refs.map((r) => r.rank);
  }

  get size(): number {
    return this.refs.length;
  }

  /** The ActorRef on one rank. */
  ref(rank: number): ActorRef<T> {
    const r = this.byRank.get(rank);
    if (!r) {
      throw new InvalidArgumentError(`Actor ${this.actor} has no instance on rank ${rank}; it lives on ranks [${this.ranks.join(', ')}].`, {
        rank,
        ranks: this.ranks,
      });
    }
    return r;
  }

  /** Calls `method` on every rank; resolves to the results in rank order, rejects with the first failure. */
  call<K extends MethodName<T>>(method: K, ...args: MethodArgs<T, K>): Promise<MethodResult<T, K>[]> {
    return this.callWith({}, method, ...args);
  }

  callWith<K extends MethodName<T>>(opts: CallOpts, method: K, ...args: MethodArgs<T, K>): Promise<MethodResult<T, K>[]> {
    return Promise.all(this.refs.map((r) => r.invoke(method, args, opts)));
  }

  /** Like `call`, but waits for every rank and reports each outcome. */
  callSettled<K extends MethodName<T>>(method: K, ...args: MethodArgs<T, K>): Promise<PromiseSettledResult<MethodResult<T, K>>[]> {
    return Promise.allSettled(this.refs.map((r) => r.invoke(method, args)));
  }

  /** Calls `method` on one rank. */
  callOne<K extends MethodName<T>>(rank: number, method: K, ...args: MethodArgs<T, K>): Promise<MethodResult<T, K>> {
    return this.ref(rank).invoke(method, args);
  }

  /**
   * Sends `method` to every rank without waiting for replies. A failure is not
   * lost: it goes to the world's broadcast-error handler (by default printed with
   * rank and actor to stderr).
   */
  broadcast<K extends MethodName<T>>(method: K, ...args: MethodArgs<T, K>): void {
    for (const r of this.refs) {
      r.invoke(method, args).catch((err: Error) => this.onBroadcastError(err, r.rank, this.actor, method));
    }
  }
}
