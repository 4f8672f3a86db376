/**
 * Errors crossing a thread boundary.
 *
 * Structured clone keeps only `name`, `message` and `stack` of an Error and drops
 * `code`, `details` and every other own property, and Comlink's default "throw"
 * handler keeps even less. Remote errors must keep their class, `code`, rank, actor,
 * remote stack and cause chain (Monarch `ActorError` style), so they are framed
 * with msgpackr into a byte buffer and rebuilt here by code.
 */
import * as Comlink from 'comlink';
import { Packr } from 'msgpackr';
import { AscentError, errorFromCode, RemoteError, remoteErrorClass, type ErrorDetails } from '../errors.js';

export interface WireError {
  name: string;
  code?: string;
  message: string;
  stack?: string;
  details?: ErrorDetails;
  rank?: number;
  actor?: string;
  cause?: WireError;
}

const packr = new Packr({ structuredClone: true, useRecords: false, moreTypes: true });
const MAX_CAUSE_DEPTH = 8;

function toPlain(value: unknown): unknown {
  // Details must survive the codec: drop functions and symbols, keep data.
  try {
    return JSON.parse(JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? v.toString() : v)));
  } catch {
    return String(value);
  }
}

export function toWireError(err: unknown, depth = 0): WireError {
  if (!(err instanceof Error)) {
    return { name: 'Error', message: typeof err === 'string' ? err : `Non-Error value thrown: ${safeString(err)}` };
  }
  const e = err as Error & { code?: unknown; details?: unknown; rank?: unknown; actor?: unknown; remoteStack?: unknown };
  // A subclass that does not set `name` still says "Error"; its class name is more useful.
  const ctorName = (e.constructor as { name?: unknown } | undefined)?.name;
  const name = e.name === 'Error' && typeof ctorName === 'string' && ctorName && ctorName !== 'Error' ? ctorName : e.name;
  const wire: WireError = { name, message: e.message, stack: typeof e.remoteStack === 'string' ? e.remoteStack : e.stack };
  if (typeof e.code === 'string') wire.code = e.code;
  else if (typeof e.code === 'number') wire.code = String(e.code);
  if (e.details !== undefined) wire.details = toPlain(e.details) as ErrorDetails;
  if (typeof e.rank === 'number') wire.rank = e.rank;
  if (typeof e.actor === 'string') wire.actor = e.actor;
  if (e.cause !== undefined && depth < MAX_CAUSE_DEPTH) wire.cause = toWireError(e.cause, depth + 1);
  return wire;
}

function safeString(v: unknown): string {
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

/**
 * Rebuilds an error received from another thread. Ascent codes give their own class;
 * other errors keep their class name (as `name`) in a RemoteError. The remote
 * frames are in `remoteStack`, and `stack` shows them under a header naming the
 * rank and actor they ran on.
 */
export function fromWireError(wire: WireError, context: { rank?: number; actor?: string } = {}): AscentError {
  let err: AscentError;
  const userClass = remoteErrorClass(wire.name);
  if (wire.code && wire.code.startsWith('ASCENT_')) {
    err = errorFromCode(wire.code, wire.message, wire.details ?? {});
  } else if (userClass) {
    // A registered class of the user's: an instance of it, built without its constructor.
    err = Object.create(userClass.prototype) as AscentError;
    for (const [k, v] of Object.entries({ message: wire.message, details: wire.details ?? {}, ...(wire.code ? { code: wire.code } : {}) })) {
      Object.defineProperty(err, k, { value: v, writable: true, configurable: true, enumerable: k !== 'message' });
    }
    if (err.name !== wire.name) Object.defineProperty(err, 'name', { value: wire.name, writable: true, configurable: true });
  } else {
    const r = new RemoteError(wire.message, wire.details ?? {});
    r.remoteName = wire.name;
    if (wire.code) r.code = wire.code;
    err = r;
  }
  err.rank = wire.rank ?? context.rank;
  err.actor = wire.actor ?? context.actor;
  err.remoteStack = wire.stack;
  if (wire.cause) Object.defineProperty(err, 'cause', { value: fromWireError(wire.cause), enumerable: false, writable: true, configurable: true });
  setRemoteStack(err, wire.name, wire.message);
  return err;
}

/**
 * `stack` of a rebuilt error: the remote frames under a header saying where they
 * ran. The local frames at this point are Comlink's message handler, which tell
 * nothing; the caller's frames are appended by ActorRef ("-- called from --").
 */
function setRemoteStack(err: AscentError, name: string, message: string): void {
  const where = [err.rank !== undefined ? `rank ${err.rank}` : '', err.actor ? `actor ${err.actor}` : ''].filter(Boolean).join(', ');
  err.stack = `${name}: ${message}\n    -- remote stack${where ? ` (${where})` : ''} --\n${remoteFrames(err.remoteStack)}`;
}

function remoteFrames(stack: string | undefined): string {
  if (!stack) return '    (no remote stack)';
  const lines = stack.split('\n');
  const firstFrame = lines.findIndex((l) => /^\s+at /.test(l));
  return (firstFrame >= 0 ? lines.slice(firstFrame) : lines).join('\n');
}

export function encodeError(err: unknown): Uint8Array {
  return packr.pack(toWireError(err));
}

export function decodeError(bytes: Uint8Array): WireError {
  return packr.unpack(bytes) as WireError;
}

/** Tags an error with where it was raised, without overwriting an earlier (deeper) origin. */
export function tagError(err: unknown, rank: number | undefined, actor: string | undefined): unknown {
  if (err instanceof Error) {
    const e = err as Error & { rank?: number; actor?: string };
    const known = e.rank !== undefined && e.actor !== undefined;
    if (e.rank === undefined && rank !== undefined) e.rank = rank;
    if (e.actor === undefined && actor !== undefined) e.actor = actor;
    // Rebuilt remote errors (Ascent's or a registered user class) show where they ran.
    const remote = err as AscentError;
    if (!known && typeof remote.remoteStack === 'string') setRemoteStack(remote, remote.name, remote.message);
  }
  return err;
}

const THROW_MARK = '__ascentError';

/** Comlink's answer to a call that threw `err` (the id is added by the sender), framed as the handler below frames it. */
export function thrownResponse(err: unknown): { type: 'HANDLER'; name: 'throw'; value: Record<string, Uint8Array> } {
  return { type: 'HANDLER', name: 'throw', value: { [THROW_MARK]: encodeError(err) } };
}

/**
 * Replaces Comlink's "throw" transfer handler in this thread so that thrown values
 * travel as msgpackr-framed WireErrors. Must be installed on both ends (the rank
 * worker and the caller); installation is idempotent.
 */
export function installComlinkErrorHandler(): void {
  const existing = Comlink.transferHandlers.get('throw') as (Comlink.TransferHandler<unknown, unknown> & { __ascent?: boolean }) | undefined;
  if (!existing || existing.__ascent) return;
  // Comlink does not export its throw marker; its own handler knows how to spot it.
  const isThrown = existing.canHandle.bind(existing);
  const handler = {
    __ascent: true,
    canHandle: (value: unknown): value is { value: unknown } => isThrown(value),
    serialize: ({ value }: { value: unknown }): [unknown, Transferable[]] => {
      const bytes = encodeError(value);
      return [{ [THROW_MARK]: bytes }, [bytes.buffer as ArrayBuffer]];
    },
    deserialize: (serialized: unknown): never => {
      const s = serialized as Record<string, unknown>;
      if (s && s[THROW_MARK] instanceof Uint8Array) {
        throw fromWireError(decodeError(s[THROW_MARK]));
      }
      throw serialized;
    },
  };
  Comlink.transferHandlers.set('throw', handler as unknown as Comlink.TransferHandler<unknown, unknown>);
}
