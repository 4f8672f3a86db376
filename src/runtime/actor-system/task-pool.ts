/**
 * A Piscina pool for stateless work (reward scoring, data preparation), created
 * and closed with the World. Tasks name a module and an exported function; the
 * function receives the (structured-clonable) argument and returns the result.
 */
import { createRequire } from 'node:module';
import type { Piscina } from 'piscina';
import { InvalidArgumentError, RemoteError } from '../errors.js';
import { resolveModuleUrl } from './module-loader.js';
import { builtFile } from '../paths.js';

export interface TaskSpec {
  /** Module path or file URL (relative to the current directory). */
  module: string | URL;
  /** Exported function name; default `default`. */
  export?: string;
}

export interface TaskRunOptions {
  signal?: AbortSignal;
}

export class TaskPool {
  private readonly pool: Piscina;
  private closed = false;

  constructor(opts: { maxThreads: number }) {
    // Required on first use (piscina is CommonJS): ranks that never make a pool skip loading it.
    const { Piscina: Pool } = createRequire(import.meta.url)('piscina') as typeof import('piscina');
    this.pool = new Pool({
      filename: builtFile('runtime/actor-system/task-worker.js').href,
      maxThreads: opts.maxThreads,
      minThreads: 0,
      idleTimeout: 5_000,
    });
  }

  get threads(): number {
    return this.pool.threads.length;
  }

  /** Runs `spec`'s function on `arg` in a pool thread. */
  async run<R = unknown>(spec: TaskSpec, arg: unknown, opts: TaskRunOptions = {}): Promise<R> {
    if (this.closed) throw new InvalidArgumentError('The task pool is closed (the World was shut down).');
    const moduleUrl = resolveModuleUrl(spec.module, 'task module');
    try {
      return (await this.pool.run({ moduleUrl, exportName: spec.export ?? 'default', arg }, { signal: opts.signal })) as R;
    } catch (err) {
      if (err instanceof Error && !(err instanceof InvalidArgumentError)) {
        const e = new RemoteError(`Task ${spec.export ?? 'default'} in ${moduleUrl} failed: ${err.message}`, { module: moduleUrl }, { cause: err });
        e.remoteName = err.name;
        e.remoteStack = err.stack;
        throw e;
      }
      throw err;
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool.destroy();
  }
}
