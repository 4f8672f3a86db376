/**
 * Entry of every rank worker thread (both the programmatic World and `launch`).
 *
 * Sets up the rank's context, exposes a RankHost to the main thread, then either
 * waits for actors to be spawned (World) or runs the entry's `main(ctx)` (SPMD).
 */
import { flushProfile } from '../profiler.js';
import { parentPort, workerData } from 'node:worker_threads';
import * as Comlink from 'comlink';
import { guardActor } from './actor-guard.js';
import { nodePortEndpoint } from './actor-ref.js';
import { Communicator } from '../comm/comm.js';
import { SpanningCommunicator } from '../comm/spanning-comm.js';
import { Device } from '../device/device.js';
import { installComlinkErrorHandler, encodeError, tagError } from './error-wire.js';
import { ConfigError, InvalidArgumentError } from '../errors.js';
import { createLogger } from '../logger.js';
import { importModule, isClass } from './module-loader.js';
import { loadNative } from '../native.js';
import { RankActorTable, type RankContext } from './rank-context.js';
import type { BrokerApi, RankEvent, RankHostApi, RankWorkerData, SpawnRequest } from './rank-protocol.js';

const data = workerData as RankWorkerData;
if (!parentPort || data?.kind !== 'ascent-rank') {
  throw new Error('rank-worker.js must be started by Ascent as a worker thread');
}
const parent = parentPort;
const post = (ev: RankEvent) => parent.postMessage(ev);

installComlinkErrorHandler();
loadNative();
if (data.terminal) {
  // The launcher forwards this rank's stderr raw to its terminal: live displays
  // (progress bars) may redraw in place, as they would in a terminal of their own.
  Object.assign(process.stderr, { isTTY: true, columns: data.terminal.columns, rows: 24 });
}

const stopController = new AbortController();
const stopHooks: Array<(reason: string) => void | Promise<void>> = [];
const broker = Comlink.wrap<BrokerApi>(nodePortEndpoint(data.brokerPort));
const actors = new RankActorTable(data.rank, data.worldSize, broker, data.callTimeoutMs);
let mainStarted = false;
// Resolves once main(ctx) has been called (or could not be): stop hooks are
// registered inside main, so a stop must not overtake a slow entry import.
let markMainEntered!: () => void;
const mainEntered = new Promise<void>((r) => (markMainEntered = r));
// Resolves once main(ctx) returned or threw and its outcome was posted: a stop waits
// for it so that the rank's own catch / finally run before it is terminated.
let markMainSettled!: () => void;
const mainSettled = new Promise<void>((r) => (markMainSettled = r));
const device = Device.get(data.deviceOrdinal);
// Every rank joins the world communicator before it reports ready (bounded by
// HCCL_CONNECT_TIMEOUT); a rank that cannot join fails the start of the world.
// A run that spans processes: this process's ranks form the local communicator, and
// ctx.comm spans every process (hierarchical collectives, spanning-comm.ts).
const localComm = await Communicator.initRank({ uniqueId: data.worldCommId, nranks: data.localWorldSize, rank: data.localRank, device });
const comm: Communicator = data.layout ? new SpanningCommunicator(localComm, data.layout) : localComm;

const ctx: RankContext = {
  rank: data.rank,
  worldSize: data.worldSize,
  localRank: data.localRank,
  localWorldSize: data.localWorldSize,
  isLeader: data.rank === 0,
  device,
  comm,
  log: createLogger(data.rank, { prefixed: data.prefixed }),
  args: Object.freeze([...(data.entryArgs ?? [])]),
  signal: stopController.signal,
  actors,
  onStop: (fn) => {
    // Registered after the stop began: run it now rather than never.
    if (stopController.signal.aborted) void runHook(fn, String((stopController.signal.reason as Error)?.message ?? 'stopping'));
    else stopHooks.push(fn);
  },
};

async function construct(req: SpawnRequest): Promise<object> {
  const mod = await importModule(req.moduleUrl);
  const exp = mod[req.exportName];
  if (exp === undefined) {
    throw new InvalidArgumentError(
      `Module ${req.moduleUrl} has no export ${JSON.stringify(req.exportName)} (it exports: ${Object.keys(mod).join(', ') || 'nothing'}).`,
      { module: req.moduleUrl, export: req.exportName },
    );
  }
  if (isClass(exp)) return new exp(ctx, ...req.args) as object;
  if (typeof exp === 'function') {
    const made = await (exp as (...a: unknown[]) => unknown)(ctx, ...req.args);
    if (made === null || typeof made !== 'object') {
      throw new InvalidArgumentError(
        `Actor factory ${req.exportName} in ${req.moduleUrl} returned ${made === null ? 'null' : typeof made}; expected an object.`,
      );
    }
    return made;
  }
  if (typeof exp === 'object' && exp !== null) return exp;
  throw new InvalidArgumentError(`Export ${req.exportName} of ${req.moduleUrl} is a ${typeof exp}; expected a class, factory function or object.`);
}

const host: RankHostApi = {
  async spawn(req, port) {
    try {
      const obj = await construct(req);
      actors.expose(req.name, obj);
      Comlink.expose(guardActor(obj, req.name, data.rank), nodePortEndpoint(port));
    } catch (err) {
      port.close();
      throw tagError(err, data.rank, req.name);
    }
  },
  async attach(name, port, timeoutMs) {
    try {
      const obj = await actors.lookup(name, timeoutMs);
      Comlink.expose(guardActor(obj, name, data.rank), nodePortEndpoint(port));
    } catch (err) {
      port.close();
      throw tagError(err, data.rank, name);
    }
  },
  peerDied(rank, reason) {
    actors.peerDied(rank, reason);
  },
  async stop(reason) {
    if (!stopController.signal.aborted) stopController.abort(new Error(reason));
    // Wake anything blocked in a collective before the hooks run.
    // Only this process's ranks: a stop is this process's business (the launcher tells other processes of failures).
    if (!localComm.aborted) localComm.abort(`rank ${data.rank} is stopping: ${reason}`);
    if (mainStarted) await mainEntered;
    for (const hook of stopHooks.splice(0)) await runHook(hook, reason);
    if (mainStarted) await mainSettled;
    // A worker's stdout is forwarded asynchronously; wait until what the hooks printed
    // has been handed to the parent, or termination right after this may drop it.
    // (A rank that ran main wrote its trace before reporting; what the hooks ran since is added.)
    flushProfile();
    await Promise.all([flush(process.stdout), flush(process.stderr)]);
    post({ type: 'stopped' });
  },
  ping() {
    return 'pong';
  },
  runMain() {
    if (!data.entry) throw new InvalidArgumentError(`Rank ${data.rank} was started without an entry module; runMain() needs SPMD mode.`);
    if (mainStarted) return;
    mainStarted = true;
    // The trace is written before the rank reports: once every rank has reported, the
    // launcher stops them within its grace period, which must not cut a large trace's write.
    runEntry(data.entry)
      .then(
        () => {
          flushProfile();
          post({ type: 'main-done' });
        },
        (err) => {
          flushProfile();
          const bytes = encodeError(tagError(err, data.rank, undefined));
          parent.postMessage({ type: 'main-failed', error: bytes } satisfies RankEvent, [bytes.buffer as ArrayBuffer]);
        },
      )
      .finally(markMainSettled);
  },
};
Comlink.expose(host, nodePortEndpoint(data.controlPort));

async function runHook(hook: (reason: string) => void | Promise<void>, reason: string): Promise<void> {
  try {
    await hook(reason);
  } catch (err) {
    process.stderr.write(`stop hook failed: ${(err as Error).stack ?? String(err)}\n`);
  }
}

function flush(stream: NodeJS.WriteStream): Promise<void> {
  return new Promise((resolve) => stream.write('', () => resolve()));
}

async function runEntry(entryUrl: string): Promise<void> {
  let mod: Record<string, unknown>;
  try {
    mod = await importModule(entryUrl);
  } catch (err) {
    markMainEntered();
    throw err;
  }
  const main = (mod.main ?? mod.default) as unknown;
  markMainEntered();
  if (typeof main !== 'function') {
    throw new ConfigError(
      `The entry ${entryUrl} exports no main(ctx) function (it exports: ${Object.keys(mod).join(', ') || 'nothing'}). HINT: add \`export async function main(ctx) { ... }\`.`,
    );
  }
  await (main as (c: RankContext) => unknown)(ctx);
}

post({ type: 'ready' });
