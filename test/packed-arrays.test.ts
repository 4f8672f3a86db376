/**
 * Hot producers hand out PACKED arrays whether or not V8 has optimised them. Array.prototype.map
 * returns a PACKED array from the builtin but a HOLEY one once TurboFan inlines it, so a consumer
 * optimised on the first kind was deoptimised ("wrong map") as soon as the producer was optimised,
 * and recompiled many steps later: in the 16-rank quickstart that was the autograd backward
 * closures and the engine's generate loop. The check runs each producer interpreted, then forces
 * it optimised (a child node with --allow-natives-syntax) and asks V8 for the arrays' kinds.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

const dist = (p: string) => JSON.stringify(new URL(`../dist/src/${p}`, import.meta.url).href);

/** Runs `body` (an ES module using V8 natives) in a child node; returns the JSON it printed last. */
function natives(body: string): Record<string, unknown> {
  const r = spawnSync(process.execPath, ['--allow-natives-syntax', '--input-type=module', '-e', body], { encoding: 'utf8', timeout: 60_000 });
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as Record<string, unknown>;
}

// %GetOptimizationStatus bit: the function has optimised code.
const OPTIMIZED = 16;

describe('packed arrays from hot producers', () => {
  it('Tape.backward gives every backward closure a packed gradient array, interpreted or optimised', () => {
    const out = natives(`
      import { Tape, Var } from ${dist('model/autograd.js')};
      // backward() reads only numel of the seed and the loss: no device is needed.
      const t = { numel: 1, shape: [1] };
      const holey = [];
      function run() {
        const tape = new Tape({ stream: {} });
        const x = new Var(t, true, 'x'), y = new Var(t, false, 'y'), z = new Var(t, false, 'z');
        tape.record('a', [x], [y], (g) => (holey.push(%HasHoleyElements(g)), [undefined]));
        tape.record('b', [y], [z], (g) => (holey.push(%HasHoleyElements(g)), [t]));
        tape.backward(z, t);
      }
      const backward = Tape.prototype.backward;
      %PrepareFunctionForOptimization(backward);
      run();
      run();
      %OptimizeFunctionOnNextCall(backward);
      run();
      console.log(JSON.stringify({ holey, status: %GetOptimizationStatus(backward) }));`);
    expect(out.holey).toEqual([false, false, false, false, false, false]);
    // The last run really was optimised code (and nothing in it deoptimised).
    expect((out.status as number) & OPTIMIZED).toBe(OPTIMIZED);
  });

  it('checkSequences returns a packed row array, interpreted or optimised', () => {
    const out = natives(`
      import { checkSequences } from ${dist('rollout/sampling-params.js')};
      const kinds = [];
      %PrepareFunctionForOptimization(checkSequences);
      kinds.push(%HasHoleyElements(checkSequences([[1, 2], [3]], 10, 'prompts')));
      kinds.push(%HasHoleyElements(checkSequences([[4], [5, 6]], 10, 'prompts')));
      %OptimizeFunctionOnNextCall(checkSequences);
      const rows = checkSequences([[1, 2], [3]], 10, 'prompts');
      kinds.push(%HasHoleyElements(rows));
      console.log(JSON.stringify({ kinds, rows, status: %GetOptimizationStatus(checkSequences) }));`);
    expect(out.kinds).toEqual([false, false, false]);
    expect(out.rows).toEqual([[1, 2], [3]]);
    expect((out.status as number) & OPTIMIZED).toBe(OPTIMIZED);
  });
});
