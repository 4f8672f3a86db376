/**
 * The network leg between processes: the optional ascent_mpi addon
 * (native/mpi/), built only where Open MPI was found, loaded only by a run that
 * spans processes (a single-process run never touches MPI). Every call goes to
 * the process's one net thread and resolves on the calling thread; failures map
 * to Ascent's collective errors with the processes at fault.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { CollectiveMismatchError, CollectiveTimeoutError, CommAbortedError, InternalError, InvalidStateError, type AscentError } from '../errors.js';
import { packageRoot } from '../native.js';

/** What MPI_Init_thread reported. */
export interface NetInfo {
  /** This process's rank in MPI_COMM_WORLD (the launch's node rank). */
  rank: number;
  size: number;
  /** The thread level MPI provided: 'funneled' suffices (the net thread calls MPI); 'multiple' lets a split run on a helper thread. */
  threadLevel: 'single' | 'funneled' | 'serialized' | 'multiple';
  library: string;
}

/**
 * ascent_mpi.node's exports (native/mpi/mpi_addon.cc). Buffers are host memory, changed
 * in place. `commId` is a communicator among processes: 0 (the default) is the world,
 * others come from split() and are found with lookupComm().
 */
export interface NativeNet {
  init(): Promise<string>;
  finalize(): Promise<void>;
  allReduce(buf: ArrayBufferView, count: number, dtype: number, op: number, timeoutMs: number, commId?: number): Promise<void>;
  broadcast(buf: ArrayBufferView, rootProcess: number, timeoutMs: number, commId?: number): Promise<void>;
  /** `kind` names the fingerprint: NET_KIND_ALLTOALLV_COUNTS for allToAllV's count exchange. */
  allGather(send: ArrayBufferView, recv: ArrayBufferView, timeoutMs: number, commId?: number, kind?: number): Promise<void>;
  barrier(timeoutMs: number, commId?: number): Promise<void>;
  /** Block p (bytes / size) of send goes to process p; block p of recv comes from it. */
  allToAll(send: ArrayBufferView, recv: ArrayBufferView, timeoutMs: number, commId?: number): Promise<void>;
  /** recv (blockCount elements) = block `rank` of op over every process's send. */
  reduceScatter(send: ArrayBufferView, recv: ArrayBufferView, blockCount: number, dtype: number, op: number, timeoutMs: number, commId?: number): Promise<void>;
  /** Point-to-point between processes: resolves when the transfer completed (the net thread never blocks on it). */
  send(buf: ArrayBufferView, peerProcess: number, tag: number, timeoutMs: number, commId?: number): Promise<void>;
  recv(buf: ArrayBufferView, peerProcess: number, tag: number, timeoutMs: number, commId?: number): Promise<void>;
  /** One communicator per color among the processes flagged in `member`; resolves to JSON {color: id}. */
  split(parentId: number, colors: Int32Array, member: Uint8Array, keyPrefix: string, timeoutMs: number): Promise<string>;
  lookupComm(key: string): number;
  abortJob(reason: string, timeoutMs: number): Promise<void>;
  onAbort(fn: (reason: string, process: number) => void): void;
  abortedBecause(): string;
}

/** The fingerprint kind of allToAllV's count exchange (native/mpi/net_common.h). */
export const NET_KIND_ALLTOALLV_COUNTS = 8;

export function netAddonPath(): string {
  return join(packageRoot(), 'build', 'Release', 'ascent_mpi.node');
}

/** True when the MPI addon was built (Open MPI was found at build time). */
export function netAvailable(): boolean {
  return existsSync(netAddonPath());
}

let net: NativeNet | undefined;

/** The MPI addon; a clear InvalidStateError when it was not built. */
export function loadNet(): NativeNet {
  if (net) return net;
  const path = netAddonPath();
  if (!existsSync(path)) {
    throw new InvalidStateError(
      `This run spans several processes (it was started by mpirun) but Ascent's MPI addon is not built (${path} is missing). HINT: run scripts/install-mpi.sh, then \`npm run build:native\` (it builds ascent_mpi.node when Open MPI is found).`,
    );
  }
  net = createRequire(import.meta.url)(path) as NativeNet;
  return net;
}

/**
 * An abort notice names the ranks at fault as a `[culprit ranks 3, 5] ` tag before
 * its reason (the notice itself is text): culpritTag makes it, taggedCulprits reads it.
 */
export function culpritTag(ranks: readonly number[]): string {
  return ranks.length > 0 ? `[culprit ranks ${ranks.join(', ')}] ` : '';
}

export function taggedCulprits(text: string): number[] {
  const m = /\[culprit ranks ([\d, ]+)\]/.exec(text);
  return m ? m[1]!.split(',').map((x) => Number(x.trim())) : [];
}

/**
 * Maps a rejection of the MPI addon to Ascent's error: `culpritProcesses` names the
 * processes at fault, `culpritWorldRanks` their global ranks (the tagged ones when an
 * abort notice named them, else every rank of those processes).
 */
export function netError(err: unknown, what: string, ranksPerProcess = 1): AscentError {
  const e = err as { message?: string; netCode?: string; culpritProcesses?: number[] };
  const msg = `${what}: ${e?.message ?? String(err)}`;
  const processes = Array.isArray(e?.culpritProcesses) ? e.culpritProcesses : [];
  const tagged = taggedCulprits(msg);
  const ranks = tagged.length > 0 ? tagged : processes.flatMap((p) => Array.from({ length: ranksPerProcess }, (_, i) => p * ranksPerProcess + i));
  const details = { culpritProcesses: processes, culpritWorldRanks: ranks };
  switch (e?.netCode) {
    case 'timeout':
      return new CollectiveTimeoutError(
        `${msg}. HINT: every process must call the same collectives in the same order; raise HCCL_EXEC_TIMEOUT if the step is just slow.`,
        details,
      );
    case 'mismatch':
      return new CollectiveMismatchError(`${msg}. HINT: every process must call the same collectives in the same order with the same shapes.`, details);
    case 'aborted':
      return new CommAbortedError(msg, details);
    case 'state':
      return new InvalidStateError(msg, details);
    default:
      return new InternalError(msg, details);
  }
}
