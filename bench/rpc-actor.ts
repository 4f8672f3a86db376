/**
 * The benchmark's actor: an echo method for the actor path, plus the same echo
 * served on raw ports (plain postMessage and plain Comlink) from the same worker,
 * so all three mechanisms are measured against one thread in one run.
 */
import type { MessagePort } from 'node:worker_threads';
import * as Comlink from 'comlink';

const echo = (x: unknown) => x;

export class RpcBench {
  echo(x: unknown): unknown {
    return x;
  }

  /** Serves raw postMessage echo on `port`. */
  serveRaw(port: MessagePort): void {
    port.on('message', (m) => port.postMessage(m));
  }

  /** Serves the echo through plain Comlink on `port`. */
  serveComlink(port: MessagePort): void {
    Comlink.expose({ echo }, port as unknown as Comlink.Endpoint);
  }
}
