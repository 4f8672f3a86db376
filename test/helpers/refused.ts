/**
 * Table-driven bad-input checks: each call must throw an InvalidArgumentError whose message matches
 * its pattern (the pattern names the failing case in the assertion message).
 */
import { expect } from 'vitest';
import { InvalidArgumentError } from '../../src/runtime/errors.js';

export type RefusedCase = readonly [run: () => unknown, pattern: RegExp];

/** One bad call: it must throw an InvalidArgumentError whose message matches `pattern`. */
export function expectRefused(run: () => unknown, pattern: RegExp): void {
  let err: unknown;
  try {
    run();
  } catch (e) {
    err = e;
  }
  expect(err, String(pattern)).toBeInstanceOf(InvalidArgumentError);
  expect((err as Error).message, String(pattern)).toMatch(pattern);
}

export function expectEachRefused(cases: readonly RefusedCase[]): void {
  for (const [run, pattern] of cases) expectRefused(run, pattern);
}

/** The InvalidArgumentError `fn` throws (for checks on its details); fails the test when it throws none or another kind. */
export function thrown(fn: () => unknown): InvalidArgumentError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(InvalidArgumentError);
    return e as InvalidArgumentError;
  }
  throw new Error('expected the call to throw');
}
