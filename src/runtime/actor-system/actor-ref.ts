/**
 * `ActorRef<T>`: a typed handle on one actor living in a rank worker, over Comlink.
 *
 * On top of Comlink it adds what Comlink lacks for a distributed runtime:
 *  - a per-call timeout and AbortSignal (the remote call cannot be cancelled, but the
 *    caller stops waiting and gets a clear error);
 *  - when the worker exits or crashes, every pending call rejects at once with
 *    `ActorDiedError` instead of hanging forever (Comlink never settles them);
 *  - remote errors keep class, `code`, rank, actor and remote stack (`error-wire.ts`);
 *    with ASCENT_ACTOR_CALLSITES=1 the caller's stack is appended too.
 */
import { profiler } from '../profiler.js';
import * as Comlink from 'comlink';
import { ActorAbortedError, ActorDiedError, ActorTimeoutError, InvalidArgumentError } from '../errors.js';
import { envBool } from '../env.js';
import { installComlinkErrorHandler, tagError } from './error-wire.js';

// Capturing the caller's stack at every call costs ~15 µs (V8 walks the async
// frames), a third of a round trip; it is a debugging switch, off by default.
const CAPTURE_CALLSITES = envBool('ASCENT_ACTOR_CALLSITES');

/** The promise-returning view of an actor's methods. */
export type MethodName<T> = { [K in keyof T]: T[K] extends (...args: never[]) => unknown ? K : never }[keyof T] & string;

export type ActorMethods<T> = {
  [K in MethodName<T>]: T[K] extends (...args: infer A) => infer R ? (...args: A) => Promise<Awaited<R>> : never;
};

export type MethodArgs<T, K extends MethodName<T>> = T[K] extends (...args: infer A) => unknown ? A : never;
export type MethodResult<T, K extends MethodName<T>> = T[K] extends (...args: never[]) => infer R ? Awaited<R> : never;

export interface CallOpts {
  /** Reject with ActorTimeoutError when no answer came within this many ms (0 = no limit). */
  timeoutMs?: number;
  /** Reject with ActorAbortedError when this signal aborts. */
  signal?: AbortSignal;
}

interface Pending {
  reject(err: Error): void;
}

/**
 * Liveness of one rank worker as seen from this thread. Every ActorRef on that
 * rank registers its pending calls here; `markDead` rejects them all.
 */
export class RankLiveness {
  private readonly pending = new Set<Pending>();
  private deadError: ActorDiedError | undefined;

  constructor(readonly rank: number) {}

  get dead(): ActorDiedError | undefined {
    return this.deadError;
  }

  add(p: Pending): void {
    this.pending.add(p);
  }

  delete(p: Pending): void {
    this.pending.delete(p);
  }

  get pendingCount(): number {
    return this.pending.size;
  }

  markDead(reason: string, details: Record<string, unknown> = {}): void {
    if (this.deadError) return;
    this.deadError = new ActorDiedError(`Rank ${this.rank} is gone: ${reason}`, { rank: this.rank, ...details });
    this.deadError.rank = this.rank;
    const all = [...this.pending];
    this.pending.clear();
    for (const p of all) p.reject(this.deadError);
  }
}

function diedError(base: ActorDiedError, actor: string, method: string): ActorDiedError {
  const err = new ActorDiedError(`${base.message} (call ${actor}.${method} could not complete)`, { ...base.details, actor, method });
  err.rank = base.rank;
  err.actor = actor;
  return err;
}

export class ActorRef<T = unknown> {
  /** Typed methods: `await ref.methods.step(batch)`. */
  readonly methods: ActorMethods<T>;
  private readonly remote: Comlink.Remote<Record<string, (...a: unknown[]) => unknown>>;
  private readonly bound = new Map<string, (...a: unknown[]) => Promise<unknown>>();

  constructor(
    port: MessagePort | import('node:worker_threads').MessagePort,
    readonly rank: number,
    readonly actor: string,
    private readonly liveness: RankLiveness,
    private readonly defaults: CallOpts = {},
  ) {
    installComlinkErrorHandler();
    this.remote = Comlink.wrap(nodePortEndpoint(port));
    this.methods = new Proxy({} as ActorMethods<T>, {
      get: (_t, prop) => {
        if (typeof prop !== 'string' || prop === 'then') return undefined;
        let fn = this.bound.get(prop);
        if (!fn) {
          fn = (...args: unknown[]) => this.invoke(prop as MethodName<T>, args as never, this.defaults);
          this.bound.set(prop, fn);
        }
        return fn;
      },
    });
  }

  /** Same actor, other default call options (e.g. `ref.with({ timeoutMs: 1000 }).methods.step()`). */
  with(opts: CallOpts): ActorRef<T> {
    const view = Object.create(this) as ActorRef<T>;
    const defaults = { ...this.defaults, ...opts };
    Object.defineProperty(view, 'defaults', { value: defaults });
    Object.defineProperty(view, 'bound', { value: new Map() });
    Object.defineProperty(view, 'methods', {
      value: new Proxy({} as ActorMethods<T>, {
        get: (_t, prop) =>
          typeof prop === 'string' && prop !== 'then' ? (...args: unknown[]) => view.invoke(prop as MethodName<T>, args as never, defaults) : undefined,
      }),
    });
    return view;
  }

  get isAlive(): boolean {
    return !this.liveness.dead;
  }

  /** Calls `method` with `args`; rejects on timeout, abort, remote error or worker death. */
  invoke<K extends MethodName<T>>(method: K, args: MethodArgs<T, K>, opts: CallOpts = this.defaults): Promise<MethodResult<T, K>> {
    const dead = this.liveness.dead;
    if (dead) return Promise.reject(diedError(dead, this.actor, method));
    const timeoutMs = opts.timeoutMs ?? this.defaults.timeoutMs ?? 0;
    const signal = opts.signal ?? this.defaults.signal;
    if (signal?.aborted) return Promise.reject(this.abortError(method, signal));
    // After the hop only Comlink's frames remain, so the caller's stack must be taken now.
    const callSite = CAPTURE_CALLSITES ? new Error() : undefined;
    return new Promise<MethodResult<T, K>>((resolve, reject) => {
      let done = false;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const onAbort = () => settle(this.abortError(method, signal!));
      const entry: Pending = { reject: (err) => settle(diedError(err as ActorDiedError, this.actor, method)) };
      const end = profiler()?.begin('actor', `${this.actor}.${String(method)} -> rank ${this.rank}`);
      const settle = (err: Error | undefined, value?: unknown) => {
        if (done) return;
        done = true;
        end?.();
        this.liveness.delete(entry);
        if (timer !== undefined) clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (err) {
          if (callSite) appendCallSite(err, callSite);
          reject(err);
        } else resolve(value as MethodResult<T, K>);
      };
      this.liveness.add(entry);
      if (timeoutMs > 0) {
        timer = setTimeout(() => {
          const err = new ActorTimeoutError(
            `Call ${this.actor}.${method} on rank ${this.rank} did not answer within ${timeoutMs} ms. HINT: the actor may be stuck or busy; raise timeoutMs or check the rank's output.`,
            { rank: this.rank, actor: this.actor, method, timeoutMs },
          );
          err.rank = this.rank;
          err.actor = this.actor;
          settle(err);
        }, timeoutMs);
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      let call: Promise<unknown>;
      try {
        call = (this.remote[method] as (...a: unknown[]) => Promise<unknown>)(...(args as unknown[]));
      } catch (e) {
        settle(e as Error);
        return;
      }
      call.then(
        (v) => settle(undefined, v),
        (e) => settle(tagError(e, this.rank, this.actor) as Error),
      );
    });
  }

  /** Stops using the underlying port; later calls fail. */
  release(): void {
    (this.remote as unknown as { [Comlink.releaseProxy](): void })[Comlink.releaseProxy]();
  }

  private abortError(method: string, signal: AbortSignal): ActorAbortedError {
    const reason = signal.reason instanceof Error ? signal.reason.message : signal.reason !== undefined ? String(signal.reason) : 'aborted';
    const err = new ActorAbortedError(
      `Call ${this.actor}.${method} on rank ${this.rank} was aborted: ${reason}`,
      { rank: this.rank, actor: this.actor, method },
      { cause: signal.reason },
    );
    err.rank = this.rank;
    err.actor = this.actor;
    return err;
  }
}

function appendCallSite(err: Error, callSite: Error): void {
  const frames = (callSite.stack ?? '').split('\n').slice(2).join('\n');
  if (frames && typeof err.stack === 'string' && !err.stack.includes('-- called from --')) {
    err.stack = `${err.stack}\n    -- called from --\n${frames}`;
  }
}

/**
 * Node's MessagePort is an EventEmitter with `on('message')` delivering data
 * directly; Comlink wants the DOM `addEventListener('message', ev => ev.data)` shape.
 * Node 20's MessagePort supports addEventListener too, so this only starts the port.
 */
export function nodePortEndpoint(port: MessagePort | import('node:worker_threads').MessagePort): Comlink.Endpoint {
  const p = port as unknown as Comlink.Endpoint & { start?: () => void };
  if (typeof p.addEventListener !== 'function') {
    throw new InvalidArgumentError('Expected a MessagePort for an actor endpoint');
  }
  p.start?.();
  return p;
}
