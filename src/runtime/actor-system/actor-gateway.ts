/**
 * Actors across processes (a run under mpirun). Within a process a rank reaches an
 * actor through a MessagePort the main thread pairs (world.ts's broker); for a rank
 * of another process the main thread pairs the port with a local socket to that
 * process's gateway instead, which attaches the other end to the target rank just
 * as its own broker would. Comlink's messages then cross the socket as msgpackr
 * frames, so calls, returns and remote errors (framed by error-wire.ts) keep the
 * semantics they have within a process.
 *
 * Each process listens on one socket (a Unix socket when every process runs on
 * this host, else TCP); the addresses are exchanged over MPI at start. One socket
 * connection per ActorRef. A rank that dies is announced on every connection to it;
 * a connection the other side drops (its process died) marks every rank of that
 * process dead: pending calls then reject with ActorDiedError at once.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { MessageChannel, MessagePort } from 'node:worker_threads';
import { Packr } from 'msgpackr';
import { decodeError, encodeError, fromWireError, thrownResponse } from './error-wire.js';
import { ActorTimeoutError, InvalidArgumentError, InvalidStateError } from '../errors.js';

/** What the gateway asks of this process's World. */
export interface GatewayHost {
  /** Attaches actor `name` of local rank `rank` to `port` (waits up to `timeoutMs` for it to be exposed). */
  attach(rank: number, name: string, port: MessagePort, timeoutMs: number): Promise<void>;
  /** Tells this process's ranks that `rank` (of another process) is gone. */
  peerDied(rank: number, reason: string): void;
}

type Frame =
  | { t: 'hello'; target: number; name: string; timeoutMs: number }
  | { t: 'ok' }
  | { t: 'err'; e: Uint8Array }
  | { t: 'm'; d: unknown }
  | { t: 'died'; rank: number; reason: string }
  | { t: 'bye' };

const packr = new Packr({ structuredClone: true, useRecords: false, moreTypes: true });

/** Length-prefixed msgpackr frames over a socket. */
class FrameSocket {
  #buf: Buffer = Buffer.alloc(0);
  closedByUs = false;
  /** The other side closed its port in order (its end of the actor is gone, not its process). */
  peerSaidBye = false;

  constructor(
    readonly socket: Socket,
    onFrame: (f: Frame) => void,
  ) {
    socket.on('data', (chunk: Buffer) => {
      this.#buf = this.#buf.length === 0 ? chunk : Buffer.concat([this.#buf, chunk]);
      while (this.#buf.length >= 4) {
        const len = this.#buf.readUInt32BE(0);
        if (this.#buf.length < 4 + len) break;
        const body = this.#buf.subarray(4, 4 + len);
        this.#buf = this.#buf.subarray(4 + len);
        const f = packr.unpack(body) as Frame;
        if (f.t === 'bye') this.peerSaidBye = true;
        else onFrame(f);
      }
    });
  }

  /** Throws when `f` cannot be framed (e.g. it holds a MessagePort). */
  send(f: Frame): void {
    const body = packr.pack(f);
    const head = Buffer.alloc(4);
    head.writeUInt32BE(body.length, 0);
    this.socket.write(Buffer.concat([head, body]));
  }

  close(): void {
    this.closedByUs = true;
    this.socket.end();
  }
}

/** A MessagePort anywhere in `v` (Comlink.proxy, a transferred port): msgpackr would frame it as an empty object. */
function carriesPort(v: unknown, depth = 0): boolean {
  if (v === null || typeof v !== 'object' || depth > 8) return false;
  if (v instanceof MessagePort) return true;
  if (ArrayBuffer.isView(v)) return false;
  return Object.values(v as Record<string, unknown>).some((x) => carriesPort(x, depth + 1));
}

/** A served port closes around its worker's exit event: wait a little so that the death notice, which names the cause, goes first. */
const SERVED_CLOSE_DELAY_MS = 200;

/** Forwards Comlink messages between `port` and the socket until either side closes. */
function bridge(fs: FrameSocket, port: MessagePort, where: string, closeDelayMs = 0): void {
  port.on('message', (msg: unknown) => {
    try {
      if (carriesPort(msg)) throw new Error('a MessagePort: a Comlink.proxy callback or a transferred port');
      fs.send({ t: 'm', d: msg });
    } catch (err) {
      // Only data crosses processes (no MessagePort, Comlink.proxy or function): answer the call with an error.
      const id = (msg as { id?: unknown } | null)?.id;
      if (id === undefined) return;
      const e = new InvalidArgumentError(
        `An actor call to ${where} carries something that cannot cross processes (${(err as Error).message}). HINT: pass plain data (numbers, strings, arrays, objects, typed arrays) to actors on other processes; callbacks and ports work within a process only.`,
      );
      port.postMessage({ id, ...thrownResponse(e) });
    }
  });
  const bye = () => {
    if (fs.closedByUs || fs.socket.destroyed) return;
    try {
      fs.send({ t: 'bye' });
    } catch {
      // the socket is gone already
    }
    fs.close();
  };
  port.on('close', () => (closeDelayMs > 0 ? setTimeout(bye, closeDelayMs).unref() : bye()));
  fs.socket.on('close', () => port.close());
}

export class ActorGateway {
  #host: GatewayHost | undefined;
  #bound: Promise<void>;
  #bind!: () => void;
  /** Server side: open connections by the local rank they reach (a rank's death is told on them). */
  readonly #served = new Map<number, Set<FrameSocket>>();
  readonly #clients = new Set<FrameSocket>();
  /** Processes whose connection dropped (they died), with why: the launcher names them when mpirun then stops this one. */
  readonly #gone = new Map<number, string>();
  readonly #goneListeners = new Set<(process: number, reason: string) => void>();
  #closing = false;

  private constructor(
    private readonly server: Server,
    private readonly addresses: readonly string[],
    private readonly nodeRank: number,
    private readonly ranksPerProcess: number,
    private readonly socketDir: string | undefined,
  ) {
    this.#bound = new Promise((r) => (this.#bind = r));
    server.on('connection', (s) => this.#serve(s));
  }

  /**
   * Listens, then learns every process's address through `exchange` (an allGather of
   * text among processes, in the same order on every process).
   */
  static async open(opts: {
    nodeRank: number;
    ranksPerProcess: number;
    sameHost: boolean;
    exchange: (address: string) => Promise<string[]>;
  }): Promise<ActorGateway> {
    const server = createServer();
    let address: string;
    let dir: string | undefined;
    if (opts.sameHost) {
      dir = mkdtempSync(join(tmpdir(), 'ascent-actors-'));
      const path = join(dir, `p${opts.nodeRank}.sock`);
      await new Promise<void>((resolve, reject) => server.once('error', reject).listen(path, resolve));
      address = `unix:${path}`;
    } else {
      await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, '0.0.0.0', resolve));
      const port = (server.address() as { port: number }).port;
      address = `tcp:${hostname()}:${port}`;
    }
    server.unref(); // a listener must not keep the process alive
    let addresses: string[];
    try {
      addresses = await opts.exchange(address);
    } catch (err) {
      server.close();
      if (dir) rmSync(dir, { recursive: true, force: true });
      throw err;
    }
    return new ActorGateway(server, addresses, opts.nodeRank, opts.ranksPerProcess, dir);
  }

  /** Starts answering other processes (connections that came earlier wait for this). */
  serve(host: GatewayHost): void {
    this.#host = host;
    this.#bind();
  }

  #processOf(rank: number): number {
    return Math.floor(rank / this.ranksPerProcess);
  }

  /** A port to actor `name` on `target` (a rank of another process); rejects like a local attach would. */
  connect(target: number, name: string, timeoutMs: number): Promise<MessagePort> {
    const proc = this.#processOf(target);
    const addr = this.addresses[proc];
    if (addr === undefined || proc === this.nodeRank) {
      return Promise.reject(
        new InvalidArgumentError(
          `Rank ${target} is not a rank of another process of this job (this is process ${this.nodeRank} of ${this.addresses.length}, ${this.ranksPerProcess} ranks each). HINT: pass a rank in [0, ${this.addresses.length * this.ranksPerProcess}).`,
          { rank: target },
        ),
      );
    }
    if (this.#closing) {
      return Promise.reject(
        new InvalidStateError(`This process is shutting down; it cannot reach rank ${target} any more. HINT: get actor refs while the run is live.`, {
          rank: target,
        }),
      );
    }
    const socket = addr.startsWith('unix:') ? createConnection(addr.slice(5)) : createConnection(Number(addr.split(':')[2]), addr.split(':')[1]);
    return new Promise<MessagePort>((resolve, reject) => {
      let settled = false;
      const timer = setTimeout(
        () =>
          fail(
            new ActorTimeoutError(
              `Connecting to actor ${name} on rank ${target} (process ${proc}) took over ${timeoutMs} ms. HINT: check that process ${proc} is running and that rank ${target} exposes ${JSON.stringify(name)}.`,
              { rank: target },
            ),
          ),
        timeoutMs + 5000,
      );
      const fail = (err: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        socket.destroy();
        reject(err);
      };
      const { port1, port2 } = new MessageChannel();
      const fs = new FrameSocket(socket, (f) => {
        if (!settled) {
          if (f.t === 'ok') {
            settled = true;
            clearTimeout(timer);
            this.#clients.add(fs);
            bridge(fs, port2, `actor ${name} on rank ${target}`);
            resolve(port1);
          } else if (f.t === 'err') fail(fromWireError(decodeError(f.e), { rank: target, actor: name }));
          return;
        }
        if (f.t === 'm') port2.postMessage(f.d);
        else if (f.t === 'died') this.#host?.peerDied(f.rank, f.reason);
      });
      socket.on('error', (err) =>
        fail(
          new InvalidStateError(
            `Cannot reach process ${proc} (rank ${target}) at ${addr}: ${err.message}. HINT: the process may have exited; check its output.`,
            { rank: target },
          ),
        ),
      );
      socket.on('close', () => {
        this.#clients.delete(fs);
        if (!settled)
          fail(
            new InvalidStateError(
              `Process ${proc} closed the connection before attaching actor ${name} of rank ${target}. HINT: that process is probably stopping; check its output.`,
              { rank: target },
            ),
          );
        else if (!fs.closedByUs && !this.#closing) {
          // In order: the target's end went (its worker ended); abruptly: its whole process did.
          if (fs.peerSaidBye) this.#host?.peerDied(target, `its actor connection from process ${proc} was closed (the rank's worker ended)`);
          else this.#processGone(proc);
        }
      });
      socket.on('connect', () => fs.send({ t: 'hello', target, name, timeoutMs }));
    });
  }

  /** The other side dropped a live connection: its process is gone, and every rank of it. */
  #processGone(proc: number): void {
    const first = proc * this.ranksPerProcess;
    const who = `process ${proc} (ranks ${first}-${first + this.ranksPerProcess - 1})`;
    const reason = `${who} is gone: its actor connection closed`;
    const known = this.#gone.has(proc);
    if (!known) this.#gone.set(proc, reason);
    for (let r = first; r < first + this.ranksPerProcess; r++) this.#host?.peerDied(r, reason);
    if (!known) for (const fn of [...this.#goneListeners]) fn(proc, reason);
  }

  /** Calls `fn` when a process of the job is found gone (its connection dropped). */
  onProcessGone(fn: (process: number, reason: string) => void): void {
    this.#goneListeners.add(fn);
  }

  /**
   * The first process found gone, waiting up to `ms` for one: a peer's death reaches this
   * process through the end of its socket, which may come just after mpirun's SIGTERM for
   * that same death. Undefined when none is found in time.
   */
  async firstGoneProcess(ms: number): Promise<{ process: number; reason: string } | undefined> {
    if (this.#gone.size === 0 && ms > 0) {
      let wake!: () => void;
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        wake = resolve;
        this.#goneListeners.add(wake);
        timer = setTimeout(resolve, ms);
      });
      clearTimeout(timer);
      this.#goneListeners.delete(wake);
    }
    const first = this.#gone.entries().next();
    return first.done ? undefined : { process: first.value[0], reason: first.value[1] };
  }

  #serve(socket: Socket): void {
    let target = -1;
    const fs = new FrameSocket(socket, (f) => {
      if (f.t === 'hello' && target < 0) {
        target = f.target;
        void this.#attach(fs, f.target, f.name, f.timeoutMs);
      } else if (f.t === 'm') this.#pending.get(fs)?.postMessage(f.d);
    });
    socket.on('error', () => socket.destroy());
    socket.on('close', () => {
      this.#served.get(target)?.delete(fs);
      this.#pending.get(fs)?.close();
      this.#pending.delete(fs);
    });
  }

  /** Server side: the bridging port of each attached connection. */
  readonly #pending = new Map<FrameSocket, MessagePort>();

  async #attach(fs: FrameSocket, target: number, name: string, timeoutMs: number): Promise<void> {
    try {
      await this.#bound;
      const { port1, port2 } = new MessageChannel();
      await this.#host!.attach(target, name, port2, timeoutMs);
      this.#pending.set(fs, port1);
      let set = this.#served.get(target);
      if (!set) this.#served.set(target, (set = new Set()));
      set.add(fs);
      fs.send({ t: 'ok' });
      bridge(fs, port1, `rank ${target}`, SERVED_CLOSE_DELAY_MS);
    } catch (err) {
      try {
        fs.send({ t: 'err', e: encodeError(err) });
      } finally {
        fs.close();
      }
    }
  }

  /** A local rank died: every process holding a connection to it learns it now. */
  rankDied(rank: number, reason: string): void {
    for (const fs of this.#served.get(rank) ?? []) {
      try {
        fs.send({ t: 'died', rank, reason: `process ${this.nodeRank}: rank ${rank}'s worker is gone (${reason})` });
      } catch {
        // the connection is going anyway
      }
    }
  }

  close(): void {
    this.#closing = true;
    for (const fs of this.#clients) fs.close();
    for (const set of this.#served.values()) for (const fs of set) fs.close();
    this.server.close();
    if (this.socketDir) rmSync(this.socketDir, { recursive: true, force: true });
  }
}
