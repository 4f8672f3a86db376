/**
 * The native entry points read their arguments through one Reader and dispatch
 * through tables (base ops, model kernels, communicator methods, module functions):
 * a bad direct native call fails synchronously with an InvalidArgumentError naming
 * the call, the argument, what was expected and what was received, with a HINT,
 * and nothing is enqueued.
 */
import { describe, expect, it } from 'vitest';
import { Device, loadNative } from '../src/runtime/device/device-index.js';
import { thrown } from './helpers/refused.js';

const d0 = Device.get(0);

describe('native entry points', () => {
  it('base ops: the argument, what was expected and what was received, with a HINT; nothing enqueued', () => {
    const s = d0.newStream();
    const buf = d0.alloc(64);
    const before = s.stats().enqueued;
    const e = thrown(() => s.native.fill(buf, 0, -1, 0, 1, 0, 0));
    expect(e.message).toBe(
      "Expected a non-negative integer for count but received -1. HINT: pass fill's arguments in the order and types src/runtime/native.ts lists.",
    );
    expect(e.details).toMatchObject({ argument: 'count', op: 'fill' });
    expect(thrown(() => s.native.fill(buf, 0, 4, 0, 1, 2 as never, 0)).message).toMatch(/^Expected 0 \(fast\) or 1 \(reference\) for impl but received 2\./);
    expect(thrown(() => s.native.sleep('soon' as never, 0)).message).toMatch(/^Expected a number for ms but received a string\./);
    expect(thrown(() => s.native.permute(4, buf, 0, buf, 32, [2, 2], [2], 0, 0)).message).toMatch(
      /^Expected an array of 2 non-negative integers for srcStrides but received 1 of them\./,
    );
    expect(s.stats().enqueued).toBe(before);
    buf.release();
    s.destroy();
  });

  it('model kernels: messages start with the kernel name; unknown kernels are named', () => {
    const s = d0.newStream();
    const modelOp = (s.native.modelOp as unknown as (name: string, ...rest: unknown[]) => number).bind(s.native);
    expect(thrown(() => modelOp('rmsNorm', 'x')).message).toMatch(
      /^rmsNorm: expected a non-negative integer for T but received a string\. HINT: pass rmsNorm's arguments/,
    );
    expect(thrown(() => modelOp('rmsNorm', 2, 0)).message).toMatch(/^rmsNorm: expected a positive integer for H but received 0\./);
    expect(thrown(() => modelOp('nope')).message).toBe("modelOp: unknown kernel 'nope'.");
    // rope's inv_freq table: a Float64Array of exactly D/2 finite numbers, and a positive scale.
    expect(thrown(() => modelOp('rope', 1, 1, 8, [1, 0.1, 0.01, 0.001], 1)).message).toMatch(
      /^rope: expected a Float64Array of 4 finite numbers for invFreq but received an array\./,
    );
    expect(thrown(() => modelOp('rope', 1, 1, 8, new Float64Array(3), 1)).message).toMatch(
      /^rope: expected a Float64Array of 4 finite numbers for invFreq but received 3 of them\./,
    );
    expect(thrown(() => modelOp('rope', 1, 1, 8, Float64Array.from([1, NaN, 0, 0]), 1)).message).toMatch(
      /^rope: expected finite numbers in invFreq but element 1 is not\./,
    );
    expect(thrown(() => modelOp('rope', 1, 1, 8, new Float64Array(4), -1)).message).toMatch(/^rope: scale must be a positive finite number\./);
    s.destroy();
  });

  it('communicator methods and module functions go through the same reader', () => {
    const native = loadNative();
    const unready = new native.Communicator();
    // The usability check of the method table runs before any argument is read.
    expect(thrown(() => unready.allReduce(null as never, 0, null as never, 0, 1, 0, 0, null as never, 0)).message).toMatch(
      /^The communicator is not initialised; allReduce needs/,
    );
    expect(thrown(() => native.commInitRank('nope', 2, 0, 0, 1000, 1000, '', 0)).message).toMatch(/32 lowercase hex digits/);
    expect(thrown(() => native.commInitRank('0'.repeat(32), 2, 0, 0, -5, 1000, '', 0)).message).toMatch(
      /^Expected a positive number of ms for connectTimeoutMs but received -5\./,
    );
    const abortById = (native.commAbortById as unknown as (id: string, reason: string, culprits: unknown) => boolean).bind(native);
    expect(thrown(() => abortById('0'.repeat(32), 'x', [1, -1])).message).toMatch(/^Expected non-negative integers in culpritWorldRanks but element 1 is -1\./);
    expect(abortById('0'.repeat(32), 'x', [1])).toBe(false);
  });
});
