/**
 * World: N ranks, each a dedicated worker thread with its own environment and
 * device, driven from the main thread (single controller, like Monarch / verl's
 * driver). `launch` uses the same World in SPMD mode, where every rank runs the
 * entry's `main(ctx)`.
 *
 *   const world = await World.create({ size: 4 });
 *   const trainers = await world.spawn<Trainer>({ module: './trainer.ts', export: 'Trainer' });
 *   const losses = await trainers.call('step', batch);      // per-rank results
 *   await world.shutdown();                                  // no thread left behind
 */
import { EventEmitter } from 'node:events';
import { basename, extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MessageChannel, Worker, type MessagePort } from 'node:worker_threads';
import * as Comlink from 'comlink';
import type { ActorGateway } from './actor-gateway.js';
import { ActorMesh, type BroadcastErrorHandler } from './actor-mesh.js';
import { ActorRef, nodePortEndpoint, RankLiveness } from './actor-ref.js';
import { ActorSpecSchema, parseConfig, WorldOptionsSchema, type ActorSpec, type ResolvedWorldOptions, type WorldOptions } from '../config.js';
import { Communicator } from '../comm/comm.js';
import type { ProcessLayout } from '../comm/spanning-comm.js';
import { configureDevice } from '../device/device.js';
import { envBytes, envInt, applyRuntimeEnvDefaults, validateEnv } from '../env.js';
import { decodeError, fromWireError, installComlinkErrorHandler } from './error-wire.js';
import { ActorDiedError, AscentError, InvalidArgumentError, InvalidStateError, TimeoutError } from '../errors.js';
import { resolveModuleUrl } from './module-loader.js';
import { loadNative } from '../native.js';
import { builtFile } from '../paths.js';
import { RankOutput } from './rank-output.js';
import type { BrokerApi, RankEvent, RankHostApi, RankWorkerData } from './rank-protocol.js';
import { TaskPool } from './task-pool.js';
import { workerSafeExecArgv } from './worker-exec-argv.js';

export type RankStatus = 'starting' | 'running' | 'main-done' | 'failed' | 'exited';

export interface RankInfo {
  readonly rank: number;
  status: RankStatus;
  exitCode?: number;
  /** The error that ended this rank (thrown by main, uncaught, or a non-zero exit). */
  error?: AscentError;
  readonly output?: RankOutput;
  /** It did not stop within the grace period of a shutdown and was terminated. */
  hung?: boolean;
  /** Its worker was terminated by a shutdown (its exit is not its own doing). */
  terminated?: boolean;
}

interface RankSlot extends RankInfo {
  readonly worker: Worker;
  /** Set just before we terminate the worker: its exit then is ours, not a failure. */
  terminating?: boolean;
  readonly host: ActorRef<RankHostApi>;
  readonly liveness: RankLiveness;
  readonly controlPort: MessagePort;
  readonly brokerPort: MessagePort;
  readonly exited: Promise<number>;
  /** Resolves when the rank reported 'stopped' (its hooks ran and its main settled). */
  readonly stopped: Promise<void>;
  markStopped(): void;
}

export interface SpmdOptions {
  /** File URL of the entry module. */
  entryUrl: string;
  entryArgs: string[];
  /**
   * This process's place in a run that spans processes (mpirun): its ranks are then
   * global ranks nodeRank x size .. nodeRank x size + size - 1 of nnodes x size.
   */
  layout?: ProcessLayout;
  /** Reaches actors on the ranks of other processes (and lets them reach this one's). */
  gateway?: ActorGateway;
}

export interface WorldEvents {
  'main-done': [rank: number];
  'main-failed': [rank: number, error: AscentError];
  'rank-exit': [rank: number, code: number, error: AscentError | undefined];
}

export class World extends EventEmitter<WorldEvents> {
  private readonly slots: RankSlot[] = [];
  private taskPool: TaskPool | undefined;
  private gateway: ActorGateway | undefined;
  /** Id of the world communicator all ranks join at start (this process's part of it when the run spans processes). */
  readonly worldCommId: string = Communicator.uniqueId();
  /** Global rank of this process's first rank (0 unless the run spans processes). */
  readonly rankOffset: number;
  /** Ranks in the whole run (size x processes). */
  readonly worldSize: number;
  private closing: Promise<void> | undefined;
  private onBroadcastErrorHandler: BroadcastErrorHandler = (err, rank, actor, method) => {
    process.stderr.write(`[world] broadcast ${actor}.${method} failed on rank ${rank}: ${err.stack ?? err.message}\n`);
  };

  private constructor(
    readonly options: ResolvedWorldOptions,
    layout: ProcessLayout | undefined,
  ) {
    super();
    this.rankOffset = layout ? layout.nodeRank * options.size : 0;
    this.worldSize = layout ? layout.nnodes * options.size : options.size;
  }

  /** Starts `size` rank workers and waits until every one is ready. */
  static async create(options: WorldOptions, spmd?: SpmdOptions): Promise<World> {
    const opts = parseConfig(WorldOptionsSchema, options, 'World options');
    validateEnv({ ...process.env, ...opts.env });
    applyRuntimeEnvDefaults();
    // The addon's process-global state must live in the main thread before any worker loads it.
    loadNative();
    installComlinkErrorHandler();
    const world = new World(opts, spmd?.layout);
    const capacity = opts.deviceMemory ?? envBytes('ASCENT_DEVICE_MEMORY')!;
    for (let r = 0; r < opts.size; r++) configureDevice(r, { capacityBytes: capacity });
    try {
      await world.start(spmd);
    } catch (err) {
      await world.shutdown('start failed');
      throw err;
    }
    if (spmd?.gateway) world.serveGateway(spmd.gateway);
    if (opts.taskPool !== false) {
      world.taskPool = new TaskPool({ maxThreads: opts.taskPool.maxThreads ?? envInt('ASCENT_TASK_POOL_THREADS')! });
    }
    return world;
  }

  get size(): number {
    return this.options.size;
  }

  /** The Piscina task pool for stateless work. */
  get tasks(): TaskPool {
    if (!this.taskPool) throw new InvalidArgumentError('This World was created with taskPool: false.');
    return this.taskPool;
  }

  /** Status of every rank. */
  get ranks(): readonly RankInfo[] {
    return this.slots;
  }

  /**
   * SPMD mode: starts `main(ctx)` on every rank. Separate from `create` so that
   * listeners for 'main-done' / 'main-failed' / 'rank-exit' are in place before a
   * fast rank can finish.
   */
  async runMain(): Promise<void> {
    await Promise.all(this.slots.map((s) => s.host.invoke('runMain', [])));
  }

  /** Aborts the world communicator on every rank (e.g. after one rank failed). */
  abortWorldComm(reason: string, culpritWorldRanks: readonly number[] = []): void {
    // The communicator counts this process's ranks from 0: culprits elsewhere are named by the reason only.
    const local = culpritWorldRanks.map((r) => r - this.rankOffset).filter((r) => r >= 0 && r < this.size);
    Communicator.abortById(this.worldCommId, reason, local);
  }

  /** Other processes reach this one's actors through `gateway`; it tells this one's ranks of their ranks' deaths. */
  private serveGateway(gateway: ActorGateway): void {
    this.gateway = gateway;
    gateway.serve({
      attach: async (rank, name, port, timeoutMs) => {
        const slot = this.slotOf(rank);
        if (!slot) throw new InvalidArgumentError(`Rank ${rank} does not run in this process (ranks ${this.rankOffset}..${this.rankOffset + this.size - 1}).`);
        await slot.host.invoke('attach', [name, Comlink.transfer(port, [port as unknown as Transferable]) as MessagePort, timeoutMs]);
      },
      peerDied: (rank, reason) => {
        for (const s of this.slots) if (!s.liveness.dead) s.host.invoke('peerDied', [rank, reason]).catch(() => {});
      },
    });
  }

  /** The slot of global rank `rank`, if it runs in this process. */
  private slotOf(rank: number): RankSlot | undefined {
    return this.slots[rank - this.rankOffset];
  }

  /** Where failed broadcasts are reported (default: stderr with rank and actor). */
  onBroadcastError(handler: BroadcastErrorHandler): void {
    this.onBroadcastErrorHandler = handler;
  }

  private async start(spmd?: SpmdOptions): Promise<void> {
    const { size } = this.options;
    const workerUrl = builtFile('runtime/actor-system/rank-worker.js');
    const callTimeoutMs = this.options.callTimeoutMs ?? envInt('ASCENT_ACTOR_CALL_TIMEOUT_MS')!;
    const ready: Promise<void>[] = [];
    const layout = spmd?.layout;
    for (let localRank = 0; localRank < size; localRank++) {
      const rank = this.rankOffset + localRank;
      const control = new MessageChannel();
      const brokerCh = new MessageChannel();
      const data: RankWorkerData = {
        kind: 'ascent-rank',
        rank,
        localRank,
        worldSize: this.worldSize,
        localWorldSize: size,
        deviceOrdinal: localRank,
        prefixed: this.options.output.prefix,
        controlPort: control.port2,
        brokerPort: brokerCh.port2,
        callTimeoutMs,
        worldCommId: this.worldCommId,
        ...(this.options.output.terminal?.ranks.includes(rank) ? { terminal: { columns: this.options.output.terminal.columns } } : {}),
        ...(spmd ? { entry: spmd.entryUrl, entryArgs: spmd.entryArgs } : {}),
        ...(layout ? { layout } : {}),
      };
      const env = {
        ...process.env,
        ...this.options.env,
        RANK: String(rank),
        LOCAL_RANK: String(localRank),
        WORLD_SIZE: String(this.worldSize),
        LOCAL_WORLD_SIZE: String(size),
        ...(layout ? { NODE_RANK: String(layout.nodeRank) } : {}),
      };
      const worker = new Worker(workerUrl, {
        execArgv: workerSafeExecArgv(),
        workerData: data,
        transferList: [control.port2, brokerCh.port2],
        env,
        stdout: true,
        stderr: true,
        name: `ascent-rank-${rank}`,
      });
      const liveness = new RankLiveness(rank);
      const host = new ActorRef<RankHostApi>(control.port1, rank, 'RankHost', liveness);
      const output = new RankOutput(rank, worker.stdout, worker.stderr, this.options.output);
      let resolveExit!: (code: number) => void;
      const exited = new Promise<number>((r) => (resolveExit = r));
      let markStopped!: () => void;
      const stopped = new Promise<void>((r) => (markStopped = r));
      const slot: RankSlot = {
        rank,
        status: 'starting',
        worker,
        host,
        liveness,
        controlPort: control.port1,
        brokerPort: brokerCh.port1,
        exited,
        stopped,
        markStopped,
        output,
      };
      this.slots.push(slot);
      Comlink.expose(this.brokerFor(rank), nodePortEndpoint(brokerCh.port1));

      let crash: Error | undefined;
      ready.push(
        new Promise<void>((resolve, reject) => {
          worker.on('message', (ev: RankEvent) => this.onRankEvent(slot, ev, resolve));
          worker.on('error', (err) => {
            crash = err;
          });
          worker.on('exit', (code) => {
            this.onRankExit(slot, code, crash);
            resolveExit(code);
            reject(slot.error ?? new ActorDiedError(`Rank ${rank} exited with code ${code} before it was ready`, { rank, exitCode: code }));
          });
        }),
      );
    }
    await withDeadline(Promise.all(ready), this.options.startTimeoutMs, () => {
      const missing = this.slots.filter((s) => s.status === 'starting').map((s) => s.rank);
      return new TimeoutError(`Ranks [${missing.join(', ')}] did not start within ${this.options.startTimeoutMs} ms.`, { missing });
    });
  }

  private onRankEvent(slot: RankSlot, ev: RankEvent, ready: () => void): void {
    switch (ev.type) {
      case 'ready':
        slot.status = 'running';
        ready();
        break;
      case 'main-done':
        slot.status = 'main-done';
        this.emit('main-done', slot.rank);
        break;
      case 'main-failed': {
        const err = fromWireError(decodeError(ev.error), { rank: slot.rank });
        slot.status = 'failed';
        slot.error = err;
        this.emit('main-failed', slot.rank, err);
        break;
      }
      case 'stopped':
        // Sent on the same port after any 'main-failed' / 'main-done', so those arrived first.
        slot.markStopped();
        break;
    }
  }

  private onRankExit(slot: RankSlot, code: number, crash: Error | undefined): void {
    const wasFailed = slot.status === 'failed';
    const terminated = slot.terminating === true && !crash;
    slot.exitCode = code;
    slot.terminated = terminated;
    if (!wasFailed) {
      if (crash) {
        const err =
          crash instanceof AscentError
            ? crash
            : new ActorDiedError(`Rank ${slot.rank} crashed: ${crash.message}`, { rank: slot.rank, exitCode: code }, { cause: crash });
        err.rank = slot.rank;
        slot.error = err;
      } else if (code !== 0 && !terminated) {
        slot.error = new ActorDiedError(`Rank ${slot.rank} exited with code ${code}`, { rank: slot.rank, exitCode: code });
        slot.error.rank = slot.rank;
      }
    }
    slot.status = wasFailed || slot.error ? 'failed' : 'exited';
    const reason = terminated ? 'the world was shut down' : crash ? `worker crashed: ${crash.message}` : `worker exited with code ${code}`;
    slot.liveness.markDead(reason, terminated ? { terminated: true } : { exitCode: code });
    slot.controlPort.close();
    slot.brokerPort.close();
    if (!terminated) {
      // Peers blocked in a world collective fail now, naming this rank, not at the timeout;
      // peers holding refs to actors on this rank fail fast too.
      this.abortWorldComm(`rank ${slot.rank}'s worker is gone (${reason})`, [slot.rank]);
      this.gateway?.rankDied(slot.rank, reason);
      for (const other of this.slots) {
        if (other !== slot && !other.liveness.dead) other.host.invoke('peerDied', [slot.rank, reason]).catch(() => {});
      }
    }
    this.emit('rank-exit', slot.rank, code, slot.error);
  }

  private brokerFor(fromRank: number): BrokerApi {
    return {
      connect: async (from, target, name, timeoutMs) => {
        if (from !== fromRank) throw new InvalidArgumentError(`Rank ${fromRank} asked to connect as rank ${from}`);
        const t = this.slotOf(target);
        if (!t && target >= 0 && target < this.worldSize) {
          if (!this.gateway) {
            throw new InvalidStateError(
              `Rank ${target} runs in another process and this World has no gateway to it. HINT: start the processes with \`mpirun ... ascent launch\`, which connects them.`,
              { rank: target },
            );
          }
          const remote = await this.gateway.connect(target, name, timeoutMs);
          return Comlink.transfer(remote, [remote as unknown as Transferable]) as MessagePort;
        }
        if (!t) throw new InvalidArgumentError(`No rank ${target} in a world of ${this.worldSize}`);
        const { port1, port2 } = new MessageChannel();
        await t.host.invoke('attach', [name, Comlink.transfer(port2, [port2 as unknown as Transferable]) as MessagePort, timeoutMs]);
        return Comlink.transfer(port1, [port1 as unknown as Transferable]) as MessagePort;
      },
    };
  }

  /** Spawns an actor (class, factory or object exported by a module) on the chosen ranks. */
  async spawn<T = unknown>(spec: ActorSpec): Promise<ActorMesh<T>> {
    const s = parseConfig(ActorSpecSchema, spec, 'actor spec');
    if (this.closing) throw new InvalidArgumentError('This World is shut down; spawn needs a live World.');
    const moduleUrl = resolveModuleUrl(s.module, 'actor module');
    const ranks = s.ranks ?? this.slots.map((x) => x.rank);
    const seen = new Set<number>();
    for (const r of ranks) {
      if (r >= this.size) throw new InvalidArgumentError(`Cannot spawn on rank ${r}: the world has ranks 0..${this.size - 1}.`, { rank: r, size: this.size });
      if (seen.has(r)) throw new InvalidArgumentError(`Rank ${r} is listed twice in ranks [${ranks.join(', ')}].`);
      seen.add(r);
    }
    const name = s.name ?? (s.export === 'default' ? basename(fileURLToPath(moduleUrl), extname(moduleUrl)) : s.export);
    const callTimeoutMs = this.options.callTimeoutMs ?? envInt('ASCENT_ACTOR_CALL_TIMEOUT_MS')!;
    const refs = await Promise.all(
      [...ranks]
        .sort((a, b) => a - b)
        .map(async (rank) => {
          const slot = this.slotOf(rank)!;
          const { port1, port2 } = new MessageChannel();
          try {
            await slot.host.invoke('spawn', [
              { moduleUrl, exportName: s.export, name, args: s.args },
              Comlink.transfer(port2, [port2 as unknown as Transferable]) as MessagePort,
            ]);
          } catch (err) {
            port1.close();
            throw err;
          }
          return new ActorRef<T>(port1, rank, name, slot.liveness, callTimeoutMs > 0 ? { timeoutMs: callTimeoutMs } : {});
        }),
    );
    return new ActorMesh<T>(name, refs, (err, rank, actor, method) => this.onBroadcastErrorHandler(err, rank, actor, method));
  }

  /**
   * Stops every live rank: asks each to run its stop hooks and waits until its main
   * (SPMD) has run its own catch / finally, bounded by the grace period; then
   * terminates the workers (a rank that had not stopped by then is marked `hung`)
   * and waits for their output to drain.
   */
  async stopRanks(reason: string, gracePeriodMs = this.options.gracePeriodMs ?? envInt('ASCENT_SHUTDOWN_GRACE_MS')!): Promise<void> {
    // Abort the world communicator here, blaming nobody: otherwise the first rank to stop
    // aborts it itself and its peers' errors (and trace) would name that rank as the cause.
    this.abortWorldComm(`the world is stopping: ${reason}`);
    const live = this.slots.filter((s) => !s.liveness.dead);
    const settled = new Set<RankSlot>();
    for (const s of live) {
      s.host.invoke('stop', [reason]).catch(() => {});
      void Promise.race([s.stopped, s.exited]).then(() => settled.add(s));
    }
    await Promise.race([Promise.all(live.map((s) => Promise.race([s.stopped, s.exited]))), sleep(gracePeriodMs)]);
    await Promise.all(
      live.map((s) => {
        if (!settled.has(s) && !s.liveness.dead) s.hung = true;
        s.terminating = true;
        return s.worker.terminate().catch(() => {});
      }),
    );
    await Promise.all(this.slots.map((s) => s.exited));
    await Promise.race([Promise.all(this.slots.map((s) => s.output?.whenDrained())), sleep(1000)]);
  }

  /** Stops all ranks and the task pool. Idempotent; afterwards no Ascent thread remains. */
  shutdown(reason = 'shutdown'): Promise<void> {
    this.closing ??= (async () => {
      await this.stopRanks(reason);
      await this.taskPool?.close();
    })();
    return this.closing;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms).unref());
}

async function withDeadline<T>(p: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(onTimeout()), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}
