/**
 * What the main thread and a rank worker say to each other.
 *
 * Three channels per rank:
 *  - `parentPort`: lifecycle events from the rank (ready, SPMD main done / failed);
 *  - control port: main → rank RPC (Comlink; the rank exposes a RankHost);
 *  - broker port: rank → main RPC (Comlink; main exposes a Broker), used to reach
 *    actors on other ranks: main pairs two MessagePorts, so actor traffic between
 *    ranks then flows directly, never through the main thread.
 */
import type { MessagePort } from 'node:worker_threads';

import type { ProcessLayout } from '../comm/spanning-comm.js';

export interface RankWorkerData {
  kind: 'ascent-rank';
  rank: number;
  localRank: number;
  worldSize: number;
  localWorldSize: number;
  deviceOrdinal: number;
  /** Whether the parent prefixes this rank's output lines (the logger then does not). */
  prefixed: boolean;
  controlPort: MessagePort;
  brokerPort: MessagePort;
  /** SPMD mode: the entry module (file URL) whose `main(ctx)` every rank runs. */
  entry?: string;
  entryArgs?: string[];
  /** Default actor call timeout for refs created on this rank. */
  callTimeoutMs: number;
  /** Unique id of the world communicator every rank joins at start (`ctx.comm`). */
  worldCommId: string;
  /** The launcher's terminal: this rank's stderr then reports a TTY of these columns. */
  terminal?: { columns: number };
  /** Set when the run spans processes (mpirun): `ctx.comm` then spans them all. */
  layout?: ProcessLayout;
}

export type RankEvent = { type: 'ready' } | { type: 'main-done' } | { type: 'main-failed'; error: Uint8Array } | { type: 'stopped' };

export interface SpawnRequest {
  /** File URL of the module exporting the actor. */
  moduleUrl: string;
  exportName: string;
  name: string;
  args: unknown[];
}

/** Exposed by each rank worker to the main thread. */
export interface RankHostApi {
  spawn(req: SpawnRequest, port: MessagePort): Promise<void>;
  attach(name: string, port: MessagePort, timeoutMs: number): Promise<void>;
  peerDied(rank: number, reason: string): void;
  stop(reason: string): Promise<void>;
  ping(): string;
  /** SPMD mode: starts the entry's main(ctx); its end is reported on parentPort. */
  runMain(): void;
}

/** Exposed by the main thread to each rank worker. */
export interface BrokerApi {
  connect(fromRank: number, targetRank: number, name: string, timeoutMs: number): Promise<MessagePort>;
}
