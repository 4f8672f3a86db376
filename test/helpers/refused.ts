/**
 * Table-driven bad-input checks: each call must throw an InvalidArgumentError whose message matches
 * its pattern (the pattern names the failing case in the assertion message).
 */
import { expect } from 'vitest';
import { InvalidArgumentError } from '../../src/runtime/errors.js';

export type RefusedCase = readonly [run: () => unknown, pattern: RegExp];

export function expectEachRefused(cases: readonly RefusedCase[]): void {
  for (const [run, pattern] of cases) {
    let err: unknown;
    try {
      run();
    } catch (e) {
      err = e;
    }
    expect(err, String(pattern)).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message, String(pattern)).toMatch(pattern);
  }
}
