/**
 * Every error Ascent raises is an `AscentError` subclass with a stable `code`.
 *
 * Codes are part of the public contract: native code constructs these classes by
 * code (through the factory installed in `native.ts`), and errors that cross a
 * thread boundary are rebuilt by code on the receiving side (`error-wire.ts`), so
 * `instanceof` and `err.code` keep working across ranks.
 */

export interface ErrorDetails {
  [key: string]: unknown;
}

export class AscentError extends Error {
  /** Stable machine-readable code, e.g. `ASCENT_DEVICE_OOM`. */
  readonly code: string = 'ASCENT_ERROR';
  /** Structured facts behind the message (device, sizes, ranks, ...). */
  details: ErrorDetails;
  /** Rank on which the error was raised, when known. */
  rank?: number;
  /** Actor (class or module export) in which the error was raised, when known. */
  actor?: string;
  /** Stack trace of the remote thread, when the error crossed a thread boundary. */
  remoteStack?: string;

  constructor(message: string, details: ErrorDetails = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.details = details;
  }

  override get name(): string {
    return this.constructor.name;
  }
}

/** A caller passed something wrong. Raised synchronously, before any side effect. */
export class InvalidArgumentError extends AscentError {
  override readonly code = 'ASCENT_INVALID_ARGUMENT';
}

/** A device allocation would exceed the device's capacity. */
/**
 * A call that is valid in general but not in the object's current state: not set up yet,
 * already set up or already called, released or destroyed, asleep, or busy with another call.
 * The message says which state and what to do first.
 */
export class InvalidStateError extends AscentError {
  override readonly code = 'ASCENT_INVALID_STATE';
}

const BUG_HINT = 'HINT: this is a bug in Ascent, not in your program; please report it with this message and the stack.';

/** A condition Ascent's own code should never reach (an internal invariant broke). The message ends with a HINT saying so. */
export class InternalError extends AscentError {
  override readonly code = 'ASCENT_INTERNAL';
  constructor(message: string, details?: ErrorDetails, options?: { cause?: unknown }) {
    super(message.includes('HINT:') || message === '' ? message : `${message} ${BUG_HINT}`, details, options);
  }
}

export class DeviceOOMError extends AscentError {
  override readonly code = 'ASCENT_DEVICE_OOM';
}

/** A wait (stream synchronize, actor call, collective) passed its deadline. */
export class TimeoutError extends AscentError {
  override readonly code = 'ASCENT_TIMEOUT';
}

/** Work on a stream failed while it ran (the stream reports it at the next synchronize). */
export class StreamError extends AscentError {
  override readonly code = 'ASCENT_STREAM_ERROR';
}

/** The worker behind an actor exited or crashed; every pending call gets this. */
export class ActorDiedError extends AscentError {
  override readonly code = 'ASCENT_ACTOR_DIED';
}

/** An actor call did not answer within its `timeoutMs`. */
export class ActorTimeoutError extends AscentError {
  override readonly code = 'ASCENT_ACTOR_TIMEOUT';
}

/** An actor call was cancelled through its AbortSignal. */
export class ActorAbortedError extends AscentError {
  override readonly code = 'ASCENT_ACTOR_ABORTED';
}

/** A config, flag or option failed validation. */
export class ConfigError extends AscentError {
  override readonly code = 'ASCENT_CONFIG';
}

/** A rank of a launched world failed (thrown error or non-zero exit). */
export class RankFailedError extends AscentError {
  override readonly code = 'ASCENT_RANK_FAILED';
}

/**
 * Ranks disagreed at a collective's rendezvous (op, dtype, count, reduce op, root,
 * or allToAllV / send-recv sizes). Raised on every participating rank; the message
 * names both fingerprints and which ranks hold each.
 */
export class CollectiveMismatchError extends AscentError {
  override readonly code = 'ASCENT_COLLECTIVE_MISMATCH';
}

/**
 * A collective, P2P op or communicator init passed its deadline (HCCL_EXEC_TIMEOUT /
 * HCCL_CONNECT_TIMEOUT or the per-communicator override). The message lists the
 * ranks that arrived, the ranks missing and each rank's last enqueued / started /
 * completed op, then the flight-recorder dump path.
 */
export class CollectiveTimeoutError extends AscentError {
  override readonly code = 'ASCENT_COLLECTIVE_TIMEOUT';
}

/** The communicator was aborted (by an error, abort(), or a rank's worker exiting); names the cause. */
export class CommAbortedError extends AscentError {
  override readonly code = 'ASCENT_COMM_ABORTED';
}

/** Ranks blocked in plain send/recv wait for each other in a cycle; names the cycle. */
export class P2PDeadlockError extends AscentError {
  override readonly code = 'ASCENT_P2P_DEADLOCK';
}

/**
 * A safetensors file, sharded checkpoint index or checkpoint layout is malformed.
 * The message names the file and, when one is at fault, the tensor.
 */
export class CheckpointFormatError extends AscentError {
  override readonly code = 'ASCENT_CHECKPOINT_FORMAT';
}

/**
 * A runtime parameter of the rollout engine is in the wrong layout state for what was
 * asked (a second post-load processing, a preprocessed tensor written into a processed
 * parameter or the reverse, generating from unprocessed, offloaded or dropped weights).
 * The details name the parameter, the expected and the actual layout.
 */
export class WeightLayoutError extends AscentError {
  override readonly code = 'ASCENT_WEIGHT_LAYOUT';
}

/**
 * A weight sync (trainer → rollout engine) whose verification failed: runtime checksums
 * or probe log-probs of the engine differ from the trainer's. The details name the worst
 * tensor or probe position and the difference found.
 */
export class WeightSyncError extends AscentError {
  override readonly code = 'ASCENT_WEIGHT_SYNC';
}

/**
 * An error raised in another thread whose class is not known here. Keeps the
 * original class name in `remoteName` and the original code in `code`.
 */
export class RemoteError extends AscentError {
  override code = 'ASCENT_REMOTE';
  remoteName = 'Error';

  override get name(): string {
    return this.remoteName;
  }
}

type AscentErrorClass = new (message: string, details?: ErrorDetails, options?: { cause?: unknown }) => AscentError;

const registry = new Map<string, AscentErrorClass>();

/** Registers an error class so that native code and remote threads can build it by code. */
export function registerErrorClass(cls: AscentErrorClass): void {
  const code = new cls('').code;
  registry.set(code, cls);
}

for (const cls of [
  AscentError,
  InvalidArgumentError,
  InvalidStateError,
  InternalError,
  DeviceOOMError,
  TimeoutError,
  StreamError,
  ActorDiedError,
  ActorTimeoutError,
  ActorAbortedError,
  ConfigError,
  RankFailedError,
  CollectiveMismatchError,
  CollectiveTimeoutError,
  CommAbortedError,
  P2PDeadlockError,
  CheckpointFormatError,
  WeightLayoutError,
  WeightSyncError,
]) {
  registerErrorClass(cls);
}

type UserErrorClass = abstract new (...args: never[]) => Error;

const userClasses = new Map<string, UserErrorClass>();

/**
 * Registers an error class of your own (not an AscentError) on the receiving side,
 * by its class name: a remote error of that name then comes back as an instance of
 * it (`instanceof` holds), with its message, `code`, `details`, rank, actor, cause
 * and remote stack set; its constructor is not run. Unregistered classes arrive as
 * `RemoteError` with `name` = the class name.
 */
export function registerRemoteErrorClass(cls: UserErrorClass, name = cls.name): void {
  if (!name) throw new InvalidArgumentError('registerRemoteErrorClass needs a named class (or a name as its second argument).');
  userClasses.set(name, cls);
}

/** The user class registered under `name`, if any. */
export function remoteErrorClass(name: string): UserErrorClass | undefined {
  return userClasses.get(name);
}

/** Builds the registered class for `code`; unknown codes give a `RemoteError` that keeps the code. */
export function errorFromCode(code: string, message: string, details: ErrorDetails = {}): AscentError {
  const cls = registry.get(code);
  if (cls) return new cls(message, details);
  const err = new RemoteError(message, details);
  err.code = code;
  return err;
}

export function isAscentError(e: unknown): e is AscentError {
  return e instanceof AscentError;
}
