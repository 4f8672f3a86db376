/**
 * send / recv between ranks of different processes (SpanningCommunicator's P2P): straight
 * from the rank's thread to the process's net thread, which posts the transfer and
 * completes it later (never blocking the collectives behind it). Each ordered pair of
 * local ranks has its own MPI tag (source local rank x n + destination local rank), so
 * the k-th send of a pair matches the k-th recv of that pair, as within a process.
 * Inside a group the transfers are posted at once; groupEnd() awaits them all.
 */
import { Communicator } from './comm.js';
import { loadNet, netError } from './net.js';
import type { Stream } from '../device/stream.js';
import type { Tensor } from '../device/tensor.js';
import { InvalidArgumentError, InvalidStateError } from '../errors.js';

/** MPI guarantees tags up to 32767. */
const MAX_TAG = 32767;

export interface P2PSite {
  local: Communicator;
  /** Pairs of local ranks are tagged source x pairBase + destination (the most ranks any process of the communicator holds). */
  pairBase: number;
  /** This rank, its process, the processes, in the communicator's numbering. */
  rank: number;
  process: number;
  processes: number;
  commId: number;
  timeoutMs: number;
  worldRanksPerProcess: number;
}

export class CrossProcessP2P {
  #group: Promise<void>[] | undefined;
  #depth = 0;

  /** Moves `x` to or from `peer` of process `peerProcess` (another one than this rank's). */
  transfer(site: P2PSite, x: Tensor, peer: number, peerProcess: number, peerLocal: number, stream: Stream | undefined, isSend: boolean): Promise<void> {
    const fn = isSend ? 'send()' : 'recv()';
    const n = site.pairBase;
    if (n * n > MAX_TAG + 1) {
      throw new InvalidStateError(
        `${fn} between processes tags each pair of local ranks, which needs at most ${MAX_TAG + 1} pairs, but this run has ${n} ranks per process. HINT: use fewer ranks per process (more processes) for send / recv across processes.`,
        { fn },
      );
    }
    const tag = isSend ? site.local.rank * n + peerLocal : peerLocal * n + site.local.rank;
    const net = loadNet();
    const what = `${fn} ${isSend ? 'to' : 'from'} rank ${peer} (rank ${site.rank}, process ${site.process} of ${site.processes})`;
    const run = (async () => {
      try {
        if (isSend) {
          const bytes = await x.toBytes(stream ? { stream } : undefined);
          await net.send(bytes, peerProcess, tag, site.timeoutMs, site.commId);
        } else {
          const host = new Uint8Array(x.nbytes);
          await net.recv(host, peerProcess, tag, site.timeoutMs, site.commId);
          (stream ?? x.device.defaultStream).native.copyH2D(x.buffer, x.byteOffset, host, 0);
        }
      } catch (err) {
        const e = (err as { netCode?: unknown }).netCode !== undefined ? netError(err, what, site.worldRanksPerProcess) : (err as Error);
        // As for a collective: this process's other ranks fail at once, not at their own deadline.
        if (!site.local.aborted) Communicator.abortById(site.local.id, `rank ${site.rank}: ${what} failed: ${e.message}`);
        throw e;
      }
    })();
    if (this.#group) {
      run.catch(() => undefined); // the caller may only await groupEnd()
      this.#group.push(run);
    }
    return run;
  }

  groupStart(local: Communicator): void {
    local.groupStart();
    if (this.#depth++ === 0) this.#group = [];
  }

  groupEnd(local: Communicator): Promise<void> {
    if (this.#depth === 0)
      throw new InvalidArgumentError('groupEnd() without a matching groupStart(). HINT: pair every groupEnd() with a groupStart() before it.');
    const done = local.groupEnd();
    if (--this.#depth > 0) return done;
    const remote = this.#group ?? [];
    this.#group = undefined;
    return Promise.all([done, ...remote]).then(() => undefined);
  }
}
