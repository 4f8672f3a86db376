/**
 * Gated DeltaNet kernels (src/model/kernels/gdn.ts, native/kernels/model/gdn*.cc):
 * recurrent and chunked forms, fast and reference, against a plain fp64 JS
 * recurrence (test/helpers/gdn-ref.ts); the backward against central differences
 * of that definition; the conv1d, gated RMSNorm and gating likewise; the 2-D
 * padding mask and the refusal of a 4-D attention mask. Tolerances as in
 * model-kernels.test.ts (|got - want| <= tol (1 + |want|)).
 */
import { describe, expect, it } from 'vitest';
import { Device, Tensor, type KernelImpl } from '../src/runtime/device/device-index.js';
import { ConfigError, InvalidArgumentError, StreamError } from '../src/runtime/errors.js';
import * as K from '../src/model/kernels/index.js';
import * as G from './helpers/gdn-ref.js';
import { fdGrad, rand } from './helpers/model-ref.js';
import { Tape, Var } from '../src/model/autograd.js';
import * as GF from '../src/model/gdn-functional.js';

const d = Device.get(0);
const f32 = (data: ArrayLike<number>, shape: number[]): Tensor => Tensor.fromArray(d, Float32Array.from(data), shape);
const i32 = (data: ArrayLike<number>, shape: number[]): Tensor => Tensor.fromArray(d, Int32Array.from(data), shape);
const host = async (t: Tensor): Promise<number[]> => Array.from(await t.toArray(), Number);

function close(got: ArrayLike<number>, want: ArrayLike<number>, tol: number, label: string): void {
  expect(got.length, `${label}: length`).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    const diff = Math.abs(got[i]! - want[i]!);
    if (!(diff <= tol * (1 + Math.abs(want[i]!)))) throw new Error(`${label}: mismatch at ${i}: got ${got[i]} want ${want[i]} (tol ${tol})`);
  }
}

interface Case {
  s: G.GdnShape;
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  g: Float32Array;
  beta: Float32Array;
  h0: Float32Array;
  mask: number[] | null;
}

function makeCase(s: G.GdnShape, seed: number, withMask: boolean): Case {
  const { B, T, Hk, Hv, Dk, Dv } = s;
  const g = rand(B * T * Hv, seed + 3).map((x) => -0.05 - 0.3 * (x + 1)); // log decays in (-0.65, -0.05)
  const beta = rand(B * T * Hv, seed + 4).map((x) => 0.5 + 0.45 * x);
  const mask = withMask ? Array.from({ length: B * T }, (_, i) => ((i % T < 2 && Math.floor(i / T) === B - 1) || i % 7 === 5 ? 0 : 1)) : null;
  return {
    s,
    q: rand(B * T * Hk * Dk, seed),
    k: rand(B * T * Hk * Dk, seed + 1),
    v: rand(B * T * Hv * Dv, seed + 2),
    g,
    beta,
    h0: rand(B * Hv * Dk * Dv, seed + 5, 0.5),
    mask,
  };
}

function run(c: Case, impl: KernelImpl, mode: 'chunked' | 'recurrent', chunkSize = 64): K.GatedDeltaRuleResult {
  const { B, T, Hk, Hv, Dk, Dv } = c.s;
  return K.gatedDeltaRule(f32(c.q, [B, T, Hk, Dk]), f32(c.k, [B, T, Hk, Dk]), f32(c.v, [B, T, Hv, Dv]), f32(c.g, [B, T, Hv]), f32(c.beta, [B, T, Hv]), {
    impl,
    mode,
    chunkSize,
    initialState: f32(c.h0, [B, Hv, Dk, Dv]),
    mask: c.mask ? i32(c.mask, [B, T]) : undefined,
  });
}

describe('gated delta rule forward', () => {
  const s = { B: 2, T: 70, Hk: 1, Hv: 2, Dk: 12, Dv: 10 };
  const c = makeCase(s, 11, true);
  const want = G.gdn(s, c.q, c.k, c.v, c.g, c.beta, c.h0, c.mask);
  for (const impl of ['fast', 'reference'] as const) {
    for (const [mode, chunk] of [
      ['recurrent', 64],
      ['chunked', 64],
      ['chunked', 16],
    ] as const) {
      it(`${impl} ${mode}${mode === 'chunked' ? ` (chunk ${chunk})` : ''} equals the fp64 recurrence (GQA, mask, initial state)`, async () => {
        const r = run(c, impl, mode, chunk);
        close([...(await host(r.o)), ...(await host(r.finalState))], want, 2e-5, `${impl} ${mode}`);
      });
    }
  }
  it('padded tokens give o = 0 and leave the state alone (no decay)', async () => {
    const allPad = { ...c, mask: new Array(s.B * s.T).fill(0) };
    for (const mode of ['recurrent', 'chunked'] as const) {
      const r = run(allPad, 'fast', mode);
      expect((await host(r.o)).every((x) => x === 0)).toBe(true);
      close(await host(r.finalState), c.h0, 1e-6, `${mode} state untouched`);
    }
  });
  it('without l2 normalisation and without a mask or initial state', async () => {
    const s2 = { B: 1, T: 9, Hk: 2, Hv: 2, Dk: 5, Dv: 3 };
    const c2 = makeCase(s2, 21, false);
    const scaled = { ...c2, q: c2.q.map((x) => 0.3 * x), k: c2.k.map((x) => 0.3 * x) };
    const want2 = G.gdn(s2, scaled.q, scaled.k, scaled.v, scaled.g, scaled.beta, null, null, false);
    for (const impl of ['fast', 'reference'] as const) {
      for (const mode of ['recurrent', 'chunked'] as const) {
        const { B, T, Hk, Hv, Dk, Dv } = s2;
        const r = K.gatedDeltaRule(
          f32(scaled.q, [B, T, Hk, Dk]),
          f32(scaled.k, [B, T, Hk, Dk]),
          f32(scaled.v, [B, T, Hv, Dv]),
          f32(scaled.g, [B, T, Hv]),
          f32(scaled.beta, [B, T, Hv]),
          { impl, mode, chunkSize: 4, useQkL2norm: false },
        );
        close([...(await host(r.o)), ...(await host(r.finalState))], want2, 2e-5, `${impl} ${mode} no-l2`);
      }
    }
  });
  it('decode: prefill then one recurrent step with the state equals the whole sequence', async () => {
    const s3 = { B: 1, T: 6, Hk: 1, Hv: 2, Dk: 4, Dv: 4 };
    const c3 = makeCase(s3, 31, false);
    const whole = G.gdn(s3, c3.q, c3.k, c3.v, c3.g, c3.beta, c3.h0, null);
    const pre = {
      ...c3,
      s: { ...s3, T: 5 },
      q: c3.q.slice(0, 20),
      k: c3.k.slice(0, 20),
      v: c3.v.slice(0, 40),
      g: c3.g.slice(0, 10),
      beta: c3.beta.slice(0, 10),
    };
    const p = run(pre, 'fast', 'chunked');
    const step = K.gatedDeltaRule(
      f32(c3.q.slice(20), [1, 1, 1, 4]),
      f32(c3.k.slice(20), [1, 1, 1, 4]),
      f32(c3.v.slice(40), [1, 1, 2, 4]),
      f32(c3.g.slice(10), [1, 1, 2]),
      f32(c3.beta.slice(10), [1, 1, 2]),
      { mode: 'recurrent', initialState: p.finalState },
    );
    close(await host(step.o), whole.slice(40, 48), 2e-5, 'decode step');
  });
});

describe('gated delta rule backward', () => {
  const s = { B: 2, T: 5, Hk: 1, Hv: 2, Dk: 3, Dv: 2 };
  const c = makeCase(s, 41, true);
  const nO = s.B * s.T * s.Hv * s.Dv,
    nS = s.B * s.Hv * s.Dk * s.Dv;
  const dO = rand(nO, 47),
    dS = rand(nS, 48);
  const cot = [...dO, ...dS];
  const f = (over: Partial<Record<'q' | 'k' | 'v' | 'g' | 'beta' | 'h0', ArrayLike<number>>>): Float64Array =>
    G.gdn(s, over.q ?? c.q, over.k ?? c.k, over.v ?? c.v, over.g ?? c.g, over.beta ?? c.beta, over.h0 ?? c.h0, c.mask);
  it('fast and reference match central differences of the fp64 recurrence (dq, dk, dv, dg, dbeta, dh0)', async () => {
    const { B, T, Hk, Hv, Dk, Dv } = s;
    for (const impl of ['fast', 'reference'] as const) {
      const r = K.gatedDeltaRuleBackward(
        f32(dO, [B, T, Hv, Dv]),
        f32(c.q, [B, T, Hk, Dk]),
        f32(c.k, [B, T, Hk, Dk]),
        f32(c.v, [B, T, Hv, Dv]),
        f32(c.g, [B, T, Hv]),
        f32(c.beta, [B, T, Hv]),
        { impl, initialState: f32(c.h0, [B, Hv, Dk, Dv]), mask: i32(c.mask!, [B, T]), dFinalState: f32(dS, [B, Hv, Dk, Dv]) },
      );
      close(
        await host(r.dq),
        fdGrad((x) => f({ q: x }), c.q, cot),
        1e-4,
        `${impl} dq`,
      );
      close(
        await host(r.dk),
        fdGrad((x) => f({ k: x }), c.k, cot),
        1e-4,
        `${impl} dk`,
      );
      close(
        await host(r.dv),
        fdGrad((x) => f({ v: x }), c.v, cot),
        1e-4,
        `${impl} dv`,
      );
      close(
        await host(r.dg),
        fdGrad((x) => f({ g: x }), c.g, cot),
        1e-4,
        `${impl} dg`,
      );
      close(
        await host(r.dbeta),
        fdGrad((x) => f({ beta: x }), c.beta, cot),
        1e-4,
        `${impl} dbeta`,
      );
      close(
        await host(r.dInitialState),
        fdGrad((x) => f({ h0: x }), c.h0, cot),
        1e-4,
        `${impl} dh0`,
      );
    }
  });
  it('fast equals reference across several checkpoint chunks (T = 150)', async () => {
    const s2 = { B: 1, T: 150, Hk: 2, Hv: 4, Dk: 8, Dv: 6 };
    const c2 = makeCase(s2, 51, true);
    const { B, T, Hk, Hv, Dk, Dv } = s2;
    const dO2 = rand(B * T * Hv * Dv, 57);
    const grads = (impl: KernelImpl): K.GatedDeltaRuleGrads =>
      K.gatedDeltaRuleBackward(
        f32(dO2, [B, T, Hv, Dv]),
        f32(c2.q, [B, T, Hk, Dk]),
        f32(c2.k, [B, T, Hk, Dk]),
        f32(c2.v, [B, T, Hv, Dv]),
        f32(c2.g, [B, T, Hv]),
        f32(c2.beta, [B, T, Hv]),
        { impl, initialState: f32(c2.h0, [B, Hv, Dk, Dv]), mask: i32(c2.mask!, [B, T]) },
      );
    const a = grads('fast'),
      b = grads('reference');
    for (const key of ['dq', 'dk', 'dv', 'dg', 'dbeta', 'dInitialState'] as const) close(await host(a[key]), await host(b[key]), 1e-4, key);
    const dg = await host(a.dg);
    expect(dg.filter((_, i) => c2.mask![Math.floor(i / Hv)] === 0).every((x) => x === 0)).toBe(true);
  });
});

describe('gated delta rule arguments', () => {
  const s = { B: 1, T: 4, Hk: 1, Hv: 2, Dk: 3, Dv: 2 };
  const c = makeCase(s, 61, false);
  const args = (): [Tensor, Tensor, Tensor, Tensor, Tensor] => [
    f32(c.q, [1, 4, 1, 3]),
    f32(c.k, [1, 4, 1, 3]),
    f32(c.v, [1, 4, 2, 2]),
    f32(c.g, [1, 4, 2]),
    f32(c.beta, [1, 4, 2]),
  ];
  it('refuses a processed 4-D attention mask with a clear error (GDN takes the 2-D padding mask)', () => {
    const mask4 = f32(new Array(16).fill(0), [1, 1, 4, 4]);
    expect(() => K.gatedDeltaRule(...args(), { mask: mask4 })).toThrow(InvalidArgumentError);
    const m4i = i32(new Array(16).fill(1), [1, 1, 4, 4]);
    expect(() => K.gatedDeltaRule(...args(), { mask: m4i })).toThrow(/2-D \[B, T\] padding mask.*4-D attention mask must never reach the GDN path/);
  });
  it('refuses head counts that do not group and wrong shapes', () => {
    const z = (shape: number[]): Tensor => f32(new Array(shape.reduce((a, b) => a * b, 1)).fill(0), shape);
    expect(() => K.gatedDeltaRule(z([1, 4, 2, 3]), z([1, 4, 2, 3]), z([1, 4, 3, 1]), z([1, 4, 3]), z([1, 4, 3]))).toThrow(
      /value heads \(3\) must be a multiple of key heads \(2\)/,
    );
    expect(() => K.gatedDeltaRule(...args(), { initialState: f32([1, 2], [2]) })).toThrow(/initialState of shape \[B, Hv, Dk, Dv\]/);
    expect(() => K.gatedDeltaRule(...args(), { chunkSize: 4096 })).toThrow(/chunkSize must be at most 1024/);
    expect(() => K.gatedDeltaRule(...args(), { mode: 'parallel' as 'chunked' })).toThrow(/mode must be 'chunked' or 'recurrent'/);
  });
  it('a mask value other than 0 / 1 fails the stream when the op runs', async () => {
    await d.defaultStream.synchronize();
    const st = d.newStream();
    try {
      const a = args();
      const mask = Tensor.fromArray(d, Int32Array.from([1, 2, 1, 1]), [1, 4], { stream: st });
      await d.defaultStream.synchronize();
      K.gatedDeltaRule(...a, { mask, stream: st });
      const err = await st.synchronize().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(StreamError);
      expect((err as Error).message).toMatch(/mask\[0, 1\] = 2 is not 0 or 1/);
    } finally {
      st.destroy();
    }
  });
  it('ASCENT_GDN_BACKEND picks the default impl and a bad value is a ConfigError', () => {
    expect(K.gdnBackendImpl({})).toBe('fast');
    expect(K.gdnBackendImpl({ ASCENT_GDN_BACKEND: 'reference' })).toBe('reference');
    expect(K.gdnBackendImpl({ ASCENT_GDN_BACKEND: 'fused' })).toBe('fast');
    expect(() => K.gdnBackendImpl({ ASCENT_GDN_BACKEND: 'triton' })).toThrow(ConfigError);
  });
});

describe('causal conv1d, gated RMSNorm, gating', () => {
  it('conv1d forward (with state) matches JS, the decode update continues it, backward matches FD', async () => {
    const B = 2,
      T = 7,
      C = 5,
      Kk = 4;
    const x = rand(B * T * C, 71),
      w = rand(C * Kk, 72),
      s0 = rand(B * C * (Kk - 1), 73);
    const want = G.causalConv(B, T, C, Kk, x, w, s0);
    for (const impl of ['fast', 'reference'] as const) {
      const r = K.causalConv1d(f32(x, [B, T, C]), f32(w, [C, Kk]), { impl, state: f32(s0, [B, C, Kk - 1]) });
      close([...(await host(r.y)), ...(await host(r.state))], want, 2e-5, `${impl} conv`);
      // decode: the first T - 1 tokens, then one token from the returned state
      const xa = Float32Array.from({ length: B * (T - 1) * C }, (_, i) => x[Math.floor(i / ((T - 1) * C)) * T * C + (i % ((T - 1) * C))]!);
      const xb = Float32Array.from({ length: B * C }, (_, i) => x[Math.floor(i / C) * T * C + (T - 1) * C + (i % C)]!);
      const a = K.causalConv1d(f32(xa, [B, T - 1, C]), f32(w, [C, Kk]), { impl, state: f32(s0, [B, C, Kk - 1]) });
      const step = K.causalConv1d(f32(xb, [B, 1, C]), f32(w, [C, Kk]), { impl, state: a.state });
      const last = Array.from({ length: B * C }, (_, i) => want[Math.floor(i / C) * T * C + (T - 1) * C + (i % C)]!);
      close(await host(step.y), last, 2e-5, `${impl} conv decode`);
      const dy = rand(B * T * C, 74);
      const cot = [...dy, ...new Array(B * C * (Kk - 1)).fill(0)];
      const gr = K.causalConv1dBackward(f32(dy, [B, T, C]), f32(x, [B, T, C]), f32(w, [C, Kk]), { impl, state: f32(s0, [B, C, Kk - 1]) });
      close(
        await host(gr.dx),
        fdGrad((xx) => G.causalConv(B, T, C, Kk, xx, w, s0), x, cot),
        1e-4,
        `${impl} conv dx`,
      );
      close(
        await host(gr.dw),
        fdGrad((ww) => G.causalConv(B, T, C, Kk, x, ww, s0), w, cot),
        1e-4,
        `${impl} conv dw`,
      );
      close(
        await host(gr.dState),
        fdGrad((ss) => G.causalConv(B, T, C, Kk, x, w, ss), s0, cot),
        1e-4,
        `${impl} conv dstate`,
      );
    }
  });
  it('gated RMSNorm forward matches JS and its backward matches FD', async () => {
    const N = 6,
      H = 9,
      eps = 1e-6;
    const x = rand(N * H, 81),
      z = rand(N * H, 82, 2),
      w = rand(H, 83);
    for (const impl of ['fast', 'reference'] as const) {
      const r = K.gatedRmsNorm(f32(x, [2, 3, H]), f32(z, [2, 3, H]), f32(w, [H]), eps, { impl });
      close(await host(r.y), G.gatedRmsNorm(N, H, x, z, w, eps), 2e-5, `${impl} gated norm`);
      const dy = rand(N * H, 84);
      const gr = K.gatedRmsNormBackward(f32(dy, [2, 3, H]), f32(x, [2, 3, H]), f32(z, [2, 3, H]), f32(w, [H]), r.rstd, { impl });
      close(
        await host(gr.dx),
        fdGrad((xx) => G.gatedRmsNorm(N, H, xx, z, w, eps), x, dy),
        1e-4,
        `${impl} dx`,
      );
      close(
        await host(gr.dz),
        fdGrad((zz) => G.gatedRmsNorm(N, H, x, zz, w, eps), z, dy),
        1e-4,
        `${impl} dz`,
      );
      close(
        await host(gr.dw),
        fdGrad((ww) => G.gatedRmsNorm(N, H, x, z, ww, eps), w, dy),
        1e-4,
        `${impl} dw`,
      );
    }
  });
  it('gating g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b): forward and backward', async () => {
    const N = 5,
      H = 3;
    const a = rand(N * H, 91, 3),
      b = rand(N * H, 92, 3),
      aLog = rand(H, 93),
      dt = rand(H, 94);
    a[0] = 25; // the softplus threshold branch
    const want = G.gdnGating(N, H, a, b, aLog, dt);
    for (const impl of ['fast', 'reference'] as const) {
      const r = K.gdnGating(f32(a, [N, H]), f32(b, [N, H]), f32(aLog, [H]), f32(dt, [H]), { impl });
      close([...(await host(r.g)), ...(await host(r.beta))], want, 2e-5, `${impl} gating`);
      const dg = rand(N * H, 95),
        db = rand(N * H, 96);
      const cot = [...dg, ...db];
      const gr = K.gdnGatingBackward(f32(dg, [N, H]), f32(db, [N, H]), f32(a, [N, H]), f32(b, [N, H]), f32(aLog, [H]), f32(dt, [H]), { impl });
      close(
        await host(gr.da),
        fdGrad((x) => G.gdnGating(N, H, x, b, aLog, dt), a, cot),
        1e-4,
        `${impl} da`,
      );
      close(
        await host(gr.db),
        fdGrad((x) => G.gdnGating(N, H, a, x, aLog, dt), b, cot),
        1e-4,
        `${impl} db`,
      );
      close(
        await host(gr.daLog),
        fdGrad((x) => G.gdnGating(N, H, a, b, x, dt), aLog, cot),
        1e-4,
        `${impl} daLog`,
      );
      close(
        await host(gr.ddtBias),
        fdGrad((x) => G.gdnGating(N, H, a, b, aLog, x), dt, cot),
        1e-4,
        `${impl} ddtBias`,
      );
    }
  });
});

describe('GDN ops on the autograd tape', () => {
  it('gating -> gated delta rule -> gated RMSNorm: tape gradients match central differences of the fp64 composition', async () => {
    const s = { B: 1, T: 6, Hk: 1, Hv: 2, Dk: 3, Dv: 4 };
    const { B, T, Hk, Hv, Dk, Dv } = s;
    const q = rand(B * T * Hk * Dk, 101),
      k = rand(B * T * Hk * Dk, 102),
      v = rand(B * T * Hv * Dv, 103);
    const a = rand(B * T * Hv, 104),
      b = rand(B * T * Hv, 105),
      aLog = rand(Hv, 106, 0.5),
      dt = rand(Hv, 107, 0.5);
    const z = rand(B * T * Hv * Dv, 108),
      w = rand(Dv, 109);
    const seed = rand(B * T * Hv * Dv, 110);
    const compose = (qq: ArrayLike<number>, aa: ArrayLike<number>, zz: ArrayLike<number>): Float64Array => {
      const gb = G.gdnGating(B * T, Hv, aa, b, aLog, dt);
      const o = G.gdn(s, qq, k, v, gb.subarray(0, B * T * Hv), gb.subarray(B * T * Hv), null, null).subarray(0, B * T * Hv * Dv);
      return G.gatedRmsNorm(B * T * Hv, Dv, o, zz, w, 1e-6);
    };
    const tape = new Tape({ stream: d.defaultStream });
    const V = (data: ArrayLike<number>, shape: number[], grad: boolean): Var => new Var(f32(data, shape), grad);
    const qv = V(q, [B, T, Hk, Dk], true),
      av = V(a, [B, T, Hv], true),
      zv = V(z, [B * T * Hv, Dv], true);
    const gating = GF.gdnGating(tape, av, V(b, [B, T, Hv], false), V(aLog, [Hv], false), V(dt, [Hv], false));
    const o = GF.gatedDeltaRule(tape, qv, V(k, [B, T, Hk, Dk], false), V(v, [B, T, Hv, Dv], false), gating.g, gating.beta);
    const flat = new Var(o.value.reshape([B * T * Hv, Dv]), false);
    tape.record('reshape', [o], [flat], ([dy]) => [dy!.reshape(o.value.shape)]);
    const y = GF.gatedRmsNorm(tape, flat, zv, V(w, [Dv], false), 1e-6);
    tape.backward(y, f32(seed, [B * T * Hv, Dv]));
    close(
      await host(qv.grad!),
      fdGrad((x) => compose(x, a, z), q, seed),
      1e-4,
      'tape dq',
    );
    close(
      await host(av.grad!),
      fdGrad((x) => compose(q, x, z), a, seed),
      1e-4,
      'tape da',
    );
    close(
      await host(zv.grad!),
      fdGrad((x) => compose(q, a, x), z, seed),
      1e-4,
      'tape dz',
    );
    tape.release();
  });
});
