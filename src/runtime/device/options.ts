/**
 * Option checks shared by the device, stream and event classes and the ops; a leaf
 * module so that device.ts, stream.ts and event.ts need not import each other's values.
 */
import { closest, distance } from 'fastest-levenshtein';
import { describe } from './dtype.js';
import { InvalidArgumentError } from '../errors.js';

/** " Did you mean 'x'?" when a valid name is close to `name` (an edit distance of at most a third of it), else ''. */
export function didYouMean(name: string, valid: readonly string[]): string {
  if (valid.length === 0) return '';
  const best = closest(name, [...valid]);
  return distance(name.toLowerCase(), best.toLowerCase()) <= Math.max(2, Math.floor(name.length / 3)) ? ` Did you mean '${best}'?` : '';
}

export function checkOptions(opts: unknown, allowed: readonly string[], fn: string): void {
  if (opts === undefined) return;
  if (typeof opts !== 'object' || opts === null || Array.isArray(opts)) {
    throw new InvalidArgumentError(`Expected an options object for ${fn} but received ${describe(opts)}.`, { fn });
  }
  for (const key of Object.keys(opts)) {
    if (!allowed.includes(key)) {
      throw new InvalidArgumentError(`Unknown option '${key}' for ${fn}.${didYouMean(key, allowed)} Expected one of: ${allowed.join(', ')}.`, {
        fn,
        option: key,
        allowed: [...allowed],
      });
    }
  }
}

export interface SynchronizeOptions {
  /** Reject with TimeoutError (listing the pending ops) after this many ms. Default: wait forever. */
  timeoutMs?: number;
}

export function checkTimeout(opts: SynchronizeOptions | undefined, fn: string): number | undefined {
  checkOptions(opts, ['timeoutMs'], fn);
  const t = opts?.timeoutMs;
  if (t === undefined) return undefined;
  if (typeof t !== 'number' || !(t >= 0) || !Number.isFinite(t)) {
    throw new InvalidArgumentError(`Expected a non-negative finite number for timeoutMs but received ${describe(t)}.`, { argument: 'timeoutMs' });
  }
  return t;
}
