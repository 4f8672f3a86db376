/**
 * The model's mixed-precision ops (model/functional.ts) with a bf16 weight, as a bf16 trainer's
 * compute copies feed them: linear(), groupedLinear() (MoE experts) and embedding() must equal
 * the fp32 ops run on the bf16-rounded weight, input and output gradient (the only roundings the
 * bf16 path makes; both accumulate in fp32, so they agree to fp32 summation order, 1e-5
 * relative), for the output and BOTH gradients, every output and gradient fp32. A missing cast
 * of dY or x, a wrong transpose or a bf16 accumulation would be off by ~1e-3 or more.
 */
import { describe, expect, it } from 'vitest';
import { Device, Tensor, cast } from '../src/internal.js';
import { Tape, Var } from '../src/model/autograd.js';
import * as F from '../src/model/functional.js';
import { roundedToBf16 } from './helpers/bf16.js';

const TOL = 1e-5;
const dev = () => Device.get(0);

function rand(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = (s / 2 ** 32) * 2 - 1 + 1e-3 * Math.sin(i); // most values not bf16-representable
  }
  return out;
}

function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < b.length; i++) {
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  return diff / scale;
}

const f32 = async (t: Tensor) => (await t.toArray()) as Float32Array;

interface Case {
  /** Runs the op on tape with input x and weight w; returns the output. */
  op(tape: Tape, x: Var, w: Var): Var;
  x: [number[], Float32Array];
  w: [number[], Float32Array];
  yShape: number[];
}

async function run(c: Case, bf16: boolean, dy: Float32Array) {
  const d = dev();
  const stream = d.defaultStream;
  const tape = new Tape({ stream });
  // fp32 reference: the rounded values; bf16 path: the raw input and gradient, a bf16 weight.
  const xData = bf16 ? c.x[1] : roundedToBf16(c.x[1]);
  const x = new Var(Tensor.fromArray(d, xData, c.x[0]), true, 'x');
  const wf = Tensor.fromArray(d, bf16 ? c.w[1] : roundedToBf16(c.w[1]), c.w[0]);
  const w = new Var(bf16 ? cast(wf, 'bf16', { stream }) : wf, true, 'w');
  try {
    const y = c.op(tape, x, w);
    tape.backward(y, Tensor.fromArray(d, bf16 ? dy : roundedToBf16(dy), c.yShape));
    return {
      dtypes: [y.value.dtype, x.grad!.dtype, w.grad!.dtype, w.value.dtype],
      y: await f32(y.value),
      dx: await f32(x.grad!),
      dw: await f32(w.grad!),
    };
  } finally {
    tape.release();
  }
}

/** The fp32 op with the bf16-rounded weight but unrounded x and dY: what a bf16 path that forgot its casts would give. */
async function runFp32Acts(c: Case, dy: Float32Array) {
  const d = dev();
  const tape = new Tape({ stream: d.defaultStream });
  const x = new Var(Tensor.fromArray(d, c.x[1], c.x[0]), true, 'x');
  const w = new Var(Tensor.fromArray(d, roundedToBf16(c.w[1]), c.w[0]), true, 'w');
  try {
    const y = c.op(tape, x, w);
    tape.backward(y, Tensor.fromArray(d, dy, c.yShape));
    return { y: await f32(y.value), dx: await f32(x.grad!), dw: await f32(w.grad!) };
  } finally {
    tape.release();
  }
}

describe('mixed-precision ops: a bf16 weight computes as fp32 on bf16-rounded operands', () => {
  const cases: Record<string, Case> = {
    linear: { op: (t, x, w) => F.linear(t, x, w), x: [[5, 37], rand(5 * 37, 1)], w: [[19, 37], rand(19 * 37, 2)], yShape: [5, 19] },
    groupedLinear: {
      // 3 experts: rows 0..1 → expert 0, none → expert 1, rows 2..6 → expert 2.
      op: (t, x, w) => F.groupedLinear(t, x, w, Tensor.fromArray(dev(), new Int32Array([0, 2, 2, 7]), [4])),
      x: [[7, 24], rand(7 * 24, 3)],
      w: [[3, 10, 24], rand(3 * 10 * 24, 4)],
      yShape: [7, 10],
    },
  };
  for (const [name, c] of Object.entries(cases)) {
    it(`${name}: output, dX and dW (all fp32) equal the fp32 op on the rounded operands`, async () => {
      const dy = rand(
        c.yShape.reduce((a, b) => a * b, 1),
        9,
      );
      const want = await run(c, false, dy);
      const got = await run(c, true, dy);
      expect(got.dtypes).toEqual(['fp32', 'fp32', 'fp32', 'bf16']);
      expect(relErr(got.y, want.y)).toBeLessThan(TOL);
      expect(relErr(got.dx, want.dx)).toBeLessThan(TOL);
      expect(relErr(got.dw, want.dw)).toBeLessThan(TOL);
      // The comparison can tell: skipping the rounding of x / dY (fp32 activations meeting the
      // rounded weight) moves each result by far more than TOL.
      const fp32Acts = await runFp32Acts(c, dy);
      expect(relErr(fp32Acts.y, want.y)).toBeGreaterThan(10 * TOL);
      expect(relErr(fp32Acts.dx, want.dx)).toBeGreaterThan(10 * TOL);
      expect(relErr(fp32Acts.dw, want.dw)).toBeGreaterThan(10 * TOL);
    });
  }

  it('embedding: a bf16 table gives its rows as fp32 and an fp32 table gradient', async () => {
    const d = dev();
    const stream = d.defaultStream;
    const table = rand(11 * 6, 5);
    const ids = Tensor.fromArray(d, new Int32Array([3, 0, 10, 3]), [4]);
    const tape = new Tape({ stream });
    try {
      const w = new Var(cast(Tensor.fromArray(d, table, [11, 6]), 'bf16', { stream }), true, 'table');
      const y = F.embedding(tape, ids, w);
      const dy = rand(4 * 6, 6);
      tape.backward(y, Tensor.fromArray(d, dy, [4, 6]));
      expect([y.value.dtype, w.grad!.dtype]).toEqual(['fp32', 'fp32']);
      const rounded = roundedToBf16(table);
      const rows = [3, 0, 10, 3].flatMap((r) => [...rounded.subarray(r * 6, r * 6 + 6)]);
      expect([...(await f32(y.value))]).toEqual(rows);
      const g = await f32(w.grad!);
      // Row 3 was looked up twice: its gradient is the sum of both dY rows, in fp32.
      for (let j = 0; j < 6; j++) expect(g[3 * 6 + j]).toBeCloseTo(dy[j]! + dy[18 + j]!, 6);
      expect(g[1 * 6]).toBe(0);
    } finally {
      tape.release();
    }
  });
});
