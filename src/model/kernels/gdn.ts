/**
 * Gated DeltaNet kernels (native/kernels/model/gdn.h): the gated delta rule in its
 * recurrent (decode) and chunked (prefill / training) forms with one backward, the
 * causal depthwise conv1d with its state, the gated RMSNorm and the A_log / dt_bias
 * gating. `impl` defaults to ASCENT_GDN_BACKEND (`fused` -> 'fast', `reference`).
 */
import { envString } from '../../runtime/env.js';
import { BUFFER_HANDLE, type NativeBufferHandle } from '../../runtime/native.js';
import { ConfigError } from '../../runtime/errors.js';
import type { Tensor } from '../../runtime/device/tensor.js';
import {
  boolArg,
  enqueue,
  fail,
  intArg,
  numberArg,
  placement,
  shapeArg,
  tensorArg,
  withOutputs,
  type KernelImpl,
  type KernelOptions,
  type Placement,
} from './common.js';

/** process.env's choice, read once per thread: every GDN op asks, and a process.env read is a C++ call under a lock. */
let fromProcessEnv: KernelImpl | undefined;

/** The impl ASCENT_GDN_BACKEND selects for GDN calls that name none (process.env: read once per thread). */
export function gdnBackendImpl(env?: NodeJS.ProcessEnv): KernelImpl {
  if (env !== undefined) return backendOf(env);
  fromProcessEnv ??= backendOf(process.env);
  return fromProcessEnv;
}

function backendOf(env: NodeJS.ProcessEnv): KernelImpl {
  const v = envString('ASCENT_GDN_BACKEND', env) ?? 'fused';
  if (v === 'fused') return 'fast';
  if (v === 'reference') return 'reference';
  throw new ConfigError(`ASCENT_GDN_BACKEND must be 'fused' or 'reference' but is '${v}'. HINT: unset it for the default (fused).`, {
    variable: 'ASCENT_GDN_BACKEND',
  });
}

function gdnPlacement(fn: string, tensors: Record<string, Tensor>, options: object | undefined, extra: readonly string[]): Placement {
  const o = (options ?? {}) as KernelOptions;
  const resolved = o.impl === undefined ? { ...o, impl: gdnBackendImpl() } : o;
  return placement(fn, tensors, resolved, extra);
}

const nb = (t: Tensor | undefined): [NativeBufferHandle | null, number] => (t ? [t.buffer[BUFFER_HANDLE], t.byteOffset] : [null, 0]);

export interface GatedDeltaRuleOptions extends KernelOptions {
  /** 'chunked' (default; prefill and training) or 'recurrent' (decode, token by token). */
  mode?: 'chunked' | 'recurrent';
  /** Chunk length of the chunked form (default 64, at most 1024). */
  chunkSize?: number;
  /** L2-normalise q and k inside the kernel (eps 1e-6; default true, as Qwen3-Next). */
  useQkL2norm?: boolean;
  /** Initial state [B, Hv, Dk, Dv]. */
  initialState?: Tensor;
  /** 2-D padding mask [B, T] int32 (1 = token, 0 = pad: no output, no decay, no update). */
  mask?: Tensor;
}

const GDN_KEYS = ['mode', 'chunkSize', 'useQkL2norm', 'initialState', 'mask'] as const;

interface GdnDims {
  B: number;
  T: number;
  Hk: number;
  Hv: number;
  Dk: number;
  Dv: number;
}

function checkGdn(fn: string, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, o: GatedDeltaRuleOptions): GdnDims {
  for (const [n, t] of [
    ['q', q],
    ['k', k],
    ['v', v],
    ['g', g],
    ['beta', beta],
  ] as const)
    tensorArg(fn, t, n, 'fp32');
  const [B, T, Hk, Dk] = shapeArg(fn, q, 'q', [null, null, null, null], 'B, T, Hk, Dk') as [number, number, number, number];
  shapeArg(fn, k, 'k', [B, T, Hk, Dk], 'B, T, Hk, Dk');
  const [, , Hv, Dv] = shapeArg(fn, v, 'v', [B, T, null, null], 'B, T, Hv, Dv') as [number, number, number, number];
  shapeArg(fn, g, 'g', [B, T, Hv], 'B, T, Hv');
  shapeArg(fn, beta, 'beta', [B, T, Hv], 'B, T, Hv');
  if (Hk === 0 || Dk === 0 || Hv === 0 || Dv === 0) fail(fn, `head counts and head dims must be positive (Hk ${Hk}, Dk ${Dk}, Hv ${Hv}, Dv ${Dv}).`);
  if (Hv % Hk !== 0) fail(fn, `value heads (${Hv}) must be a multiple of key heads (${Hk}) (num_v_heads / num_k_heads sharing).`, { argument: 'v' });
  if (o.mask !== undefined) {
    tensorArg(fn, o.mask, 'mask', 'int32');
    if (o.mask.shape.length !== 2) {
      fail(
        fn,
        `mask must be the 2-D [B, T] padding mask (1 = token, 0 = pad) but received shape [${o.mask.shape.join(', ')}]; ` +
          'a processed 4-D attention mask must never reach the GDN path. HINT: pass the raw attention_mask [B, T], not the causal 4-D mask built for full attention.',
        { argument: 'mask' },
      );
    }
    shapeArg(fn, o.mask, 'mask', [B, T], 'B, T');
  }
  if (o.initialState !== undefined) {
    tensorArg(fn, o.initialState, 'initialState', 'fp32');
    shapeArg(fn, o.initialState, 'initialState', [B, Hv, Dk, Dv], 'B, Hv, Dk, Dv');
  }
  return { B, T, Hk, Hv, Dk, Dv };
}

function extras(o: GatedDeltaRuleOptions): Record<string, Tensor> {
  const r: Record<string, Tensor> = {};
  if (o.mask) r.mask = o.mask;
  if (o.initialState) r.initialState = o.initialState;
  return r;
}

export interface GatedDeltaRuleResult {
  /** [B, T, Hv, Dv] (0 on padded tokens). */
  o: Tensor;
  /** Final state [B, Hv, Dk, Dv]. */
  finalState: Tensor;
}

/** The gated delta rule (see gdn.h): q, k [B, T, Hk, Dk], v [B, T, Hv, Dv], g (log decay) and beta [B, T, Hv]. */
export function gatedDeltaRule(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, options?: GatedDeltaRuleOptions): GatedDeltaRuleResult {
  const fn = 'gatedDeltaRule';
  const o = (options ?? {}) as GatedDeltaRuleOptions;
  const d = checkGdn(fn, q, k, v, g, beta, o);
  const mode = o.mode ?? 'chunked';
  if (mode !== 'chunked' && mode !== 'recurrent') fail(fn, `mode must be 'chunked' or 'recurrent' but received ${String(mode)}.`, { argument: 'mode' });
  const chunk = mode === 'recurrent' ? 0 : intArg(fn, o.chunkSize ?? 64, 'chunkSize', 1);
  if (chunk > 1024) fail(fn, `chunkSize must be at most 1024 but received ${chunk}. HINT: 64 is the usual chunk.`, { argument: 'chunkSize' });
  const l2 = boolArg(fn, o.useQkL2norm ?? true, 'useQkL2norm');
  const p = gdnPlacement(fn, { q, k, v, g, beta, ...extras(o) }, options, GDN_KEYS);
  return withOutputs(p.device, { o: [[d.B, d.T, d.Hv, d.Dv], 'fp32'], finalState: [[d.B, d.Hv, d.Dk, d.Dv], 'fp32'] }, (out) =>
    enqueue(
      p,
      'gdn',
      d.B,
      d.T,
      d.Hk,
      d.Hv,
      d.Dk,
      d.Dv,
      chunk,
      l2,
      q.buffer[BUFFER_HANDLE],
      q.byteOffset,
      k.buffer[BUFFER_HANDLE],
      k.byteOffset,
      v.buffer[BUFFER_HANDLE],
      v.byteOffset,
      g.buffer[BUFFER_HANDLE],
      g.byteOffset,
      beta.buffer[BUFFER_HANDLE],
      beta.byteOffset,
      ...nb(o.mask),
      ...nb(o.initialState),
      out.o.buffer[BUFFER_HANDLE],
      0,
      out.finalState.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

export interface GatedDeltaRuleGrads {
  dq: Tensor;
  dk: Tensor;
  dv: Tensor;
  dg: Tensor;
  dbeta: Tensor;
  dInitialState: Tensor;
}

/** Gradients of gatedDeltaRule (either form) from dO [B, T, Hv, Dv] and optionally dFinalState [B, Hv, Dk, Dv]. */
export function gatedDeltaRuleBackward(
  dO: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  options?: GatedDeltaRuleOptions & { dFinalState?: Tensor },
): GatedDeltaRuleGrads {
  const fn = 'gatedDeltaRuleBackward';
  const o = (options ?? {}) as GatedDeltaRuleOptions & { dFinalState?: Tensor };
  const d = checkGdn(fn, q, k, v, g, beta, o);
  tensorArg(fn, dO, 'dO', 'fp32');
  shapeArg(fn, dO, 'dO', [d.B, d.T, d.Hv, d.Dv], 'B, T, Hv, Dv');
  const ex = extras(o);
  if (o.dFinalState !== undefined) {
    tensorArg(fn, o.dFinalState, 'dFinalState', 'fp32');
    shapeArg(fn, o.dFinalState, 'dFinalState', [d.B, d.Hv, d.Dk, d.Dv], 'B, Hv, Dk, Dv');
    ex.dFinalState = o.dFinalState;
  }
  const l2 = boolArg(fn, o.useQkL2norm ?? true, 'useQkL2norm');
  const p = gdnPlacement(fn, { dO, q, k, v, g, beta, ...ex }, options, [...GDN_KEYS, 'dFinalState']);
  const nk = [d.B, d.T, d.Hk, d.Dk],
    ng = [d.B, d.T, d.Hv];
  return withOutputs(
    p.device,
    {
      dq: [nk, 'fp32'],
      dk: [nk, 'fp32'],
      dv: [v.shape, 'fp32'],
      dg: [ng, 'fp32'],
      dbeta: [ng, 'fp32'],
      dInitialState: [[d.B, d.Hv, d.Dk, d.Dv], 'fp32'],
    },
    (r) =>
      enqueue(
        p,
        'gdnBackward',
        d.B,
        d.T,
        d.Hk,
        d.Hv,
        d.Dk,
        d.Dv,
        l2,
        q.buffer[BUFFER_HANDLE],
        q.byteOffset,
        k.buffer[BUFFER_HANDLE],
        k.byteOffset,
        v.buffer[BUFFER_HANDLE],
        v.byteOffset,
        g.buffer[BUFFER_HANDLE],
        g.byteOffset,
        beta.buffer[BUFFER_HANDLE],
        beta.byteOffset,
        ...nb(o.mask),
        ...nb(o.initialState),
        dO.buffer[BUFFER_HANDLE],
        dO.byteOffset,
        ...nb(o.dFinalState),
        r.dq.buffer[BUFFER_HANDLE],
        0,
        r.dk.buffer[BUFFER_HANDLE],
        0,
        r.dv.buffer[BUFFER_HANDLE],
        0,
        r.dg.buffer[BUFFER_HANDLE],
        0,
        r.dbeta.buffer[BUFFER_HANDLE],
        0,
        r.dInitialState.buffer[BUFFER_HANDLE],
        0,
      ),
  );
}

export interface CausalConvOptions extends KernelOptions {
  /** Conv state [B, C, K - 1] (the last K - 1 inputs, oldest first); zeros when absent. */
  state?: Tensor;
  /** Apply SiLU (default true, as Qwen3-Next). */
  silu?: boolean;
}

/** Causal depthwise conv1d: x [B, T, C], w [C, K]; returns y [B, T, C] and the next state [B, C, K - 1]. */
export function causalConv1d(x: Tensor, w: Tensor, options?: CausalConvOptions): { y: Tensor; state: Tensor } {
  const fn = 'causalConv1d';
  const o = (options ?? {}) as CausalConvOptions;
  tensorArg(fn, x, 'x', 'fp32');
  tensorArg(fn, w, 'w', 'fp32');
  const [B, T, C] = shapeArg(fn, x, 'x', [null, null, null], 'B, T, C') as [number, number, number];
  const [, K] = shapeArg(fn, w, 'w', [C, null], 'C, K') as [number, number];
  if (K < 1) fail(fn, 'kernel size K must be at least 1.', { argument: 'w' });
  const silu = boolArg(fn, o.silu ?? true, 'silu');
  const ex: Record<string, Tensor> = {};
  if (o.state !== undefined) {
    tensorArg(fn, o.state, 'state', 'fp32');
    shapeArg(fn, o.state, 'state', [B, C, K - 1], 'B, C, K - 1');
    ex.state = o.state;
  }
  const p = gdnPlacement(fn, { x, w, ...ex }, options, ['state', 'silu']);
  return withOutputs(p.device, { y: [[B, T, C], 'fp32'], state: [[B, C, K - 1], 'fp32'] }, (r) =>
    enqueue(
      p,
      'causalConv',
      B,
      T,
      C,
      K,
      silu,
      x.buffer[BUFFER_HANDLE],
      x.byteOffset,
      w.buffer[BUFFER_HANDLE],
      w.byteOffset,
      ...nb(o.state),
      r.y.buffer[BUFFER_HANDLE],
      0,
      r.state.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

/** Gradients of causalConv1d: dx [B, T, C], dw [C, K], dState [B, C, K - 1]. */
export function causalConv1dBackward(dy: Tensor, x: Tensor, w: Tensor, options?: CausalConvOptions): { dx: Tensor; dw: Tensor; dState: Tensor } {
  const fn = 'causalConv1dBackward';
  const o = (options ?? {}) as CausalConvOptions;
  for (const [n, t] of [
    ['dy', dy],
    ['x', x],
    ['w', w],
  ] as const)
    tensorArg(fn, t, n, 'fp32');
  const [B, T, C] = shapeArg(fn, x, 'x', [null, null, null], 'B, T, C') as [number, number, number];
  shapeArg(fn, dy, 'dy', [B, T, C], 'B, T, C');
  const [, K] = shapeArg(fn, w, 'w', [C, null], 'C, K') as [number, number];
  if (K < 1) fail(fn, 'kernel size K must be at least 1.', { argument: 'w' });
  const silu = boolArg(fn, o.silu ?? true, 'silu');
  const ex: Record<string, Tensor> = {};
  if (o.state !== undefined) {
    tensorArg(fn, o.state, 'state', 'fp32');
    shapeArg(fn, o.state, 'state', [B, C, K - 1], 'B, C, K - 1');
    ex.state = o.state;
  }
  const p = gdnPlacement(fn, { dy, x, w, ...ex }, options, ['state', 'silu']);
  return withOutputs(p.device, { dx: [[B, T, C], 'fp32'], dw: [[C, K], 'fp32'], dState: [[B, C, K - 1], 'fp32'] }, (r) =>
    enqueue(
      p,
      'causalConvBackward',
      B,
      T,
      C,
      K,
      silu,
      dy.buffer[BUFFER_HANDLE],
      dy.byteOffset,
      x.buffer[BUFFER_HANDLE],
      x.byteOffset,
      w.buffer[BUFFER_HANDLE],
      w.byteOffset,
      ...nb(o.state),
      r.dx.buffer[BUFFER_HANDLE],
      0,
      r.dw.buffer[BUFFER_HANDLE],
      0,
      r.dState.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

function rows(fn: string, x: Tensor, name: string): [number, number] {
  if (x.shape.length < 1) shapeArg(fn, x, name, [null, null], 'N, H');
  const H = x.shape[x.shape.length - 1]!;
  if (H === 0) fail(fn, `${name} must have a positive last dim.`, { argument: name });
  return [x.shape.slice(0, -1).reduce((a, b) => a * b, 1), H];
}

/** Gated RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w * silu(z); x and z [..., H], w [H]. */
export function gatedRmsNorm(x: Tensor, z: Tensor, w: Tensor, eps = 1e-6, options?: KernelOptions): { y: Tensor; rstd: Tensor } {
  const fn = 'gatedRmsNorm';
  for (const [n, t] of [
    ['x', x],
    ['z', z],
    ['w', w],
  ] as const)
    tensorArg(fn, t, n, 'fp32');
  numberArg(fn, eps, 'eps', (e) => e >= 0, '>= 0');
  const [N, H] = rows(fn, x, 'x');
  shapeArg(fn, z, 'z', x.shape, 'shape of x');
  shapeArg(fn, w, 'w', [H], 'H');
  const p = gdnPlacement(fn, { x, z, w }, options, []);
  return withOutputs(p.device, { y: [x.shape, 'fp32'], rstd: [x.shape.slice(0, -1), 'fp32'] }, (r) =>
    enqueue(
      p,
      'gatedRmsNorm',
      N,
      H,
      eps,
      x.buffer[BUFFER_HANDLE],
      x.byteOffset,
      z.buffer[BUFFER_HANDLE],
      z.byteOffset,
      w.buffer[BUFFER_HANDLE],
      w.byteOffset,
      r.y.buffer[BUFFER_HANDLE],
      0,
      r.rstd.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

/** Gradients of gatedRmsNorm from its saved rstd: dx, dz (shape of x) and dw [H]. */
export function gatedRmsNormBackward(
  dy: Tensor,
  x: Tensor,
  z: Tensor,
  w: Tensor,
  rstd: Tensor,
  options?: KernelOptions,
): { dx: Tensor; dz: Tensor; dw: Tensor } {
  const fn = 'gatedRmsNormBackward';
  for (const [n, t] of [
    ['dy', dy],
    ['x', x],
    ['z', z],
    ['w', w],
    ['rstd', rstd],
  ] as const)
    tensorArg(fn, t, n, 'fp32');
  const [N, H] = rows(fn, x, 'x');
  shapeArg(fn, dy, 'dy', x.shape, 'shape of x');
  shapeArg(fn, z, 'z', x.shape, 'shape of x');
  shapeArg(fn, w, 'w', [H], 'H');
  shapeArg(fn, rstd, 'rstd', x.shape.slice(0, -1), 'x.shape without H');
  const p = gdnPlacement(fn, { dy, x, z, w, rstd }, options, []);
  return withOutputs(p.device, { dx: [x.shape, 'fp32'], dz: [x.shape, 'fp32'], dw: [[H], 'fp32'] }, (r) =>
    enqueue(
      p,
      'gatedRmsNormBackward',
      N,
      H,
      dy.buffer[BUFFER_HANDLE],
      dy.byteOffset,
      x.buffer[BUFFER_HANDLE],
      x.byteOffset,
      z.buffer[BUFFER_HANDLE],
      z.byteOffset,
      w.buffer[BUFFER_HANDLE],
      w.byteOffset,
      rstd.buffer[BUFFER_HANDLE],
      rstd.byteOffset,
      r.dx.buffer[BUFFER_HANDLE],
      0,
      r.dz.buffer[BUFFER_HANDLE],
      0,
      r.dw.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

/** GDN gating: g = -exp(aLog) * softplus(a + dtBias), beta = sigmoid(b); a, b [..., H], aLog and dtBias [H]. */
export function gdnGating(a: Tensor, b: Tensor, aLog: Tensor, dtBias: Tensor, options?: KernelOptions): { g: Tensor; beta: Tensor } {
  const fn = 'gdnGating';
  for (const [n, t] of [
    ['a', a],
    ['b', b],
    ['aLog', aLog],
    ['dtBias', dtBias],
  ] as const)
    tensorArg(fn, t, n, 'fp32');
  const [N, H] = rows(fn, a, 'a');
  shapeArg(fn, b, 'b', a.shape, 'shape of a');
  shapeArg(fn, aLog, 'aLog', [H], 'H');
  shapeArg(fn, dtBias, 'dtBias', [H], 'H');
  const p = gdnPlacement(fn, { a, b, aLog, dtBias }, options, []);
  return withOutputs(p.device, { g: [a.shape, 'fp32'], beta: [a.shape, 'fp32'] }, (r) =>
    enqueue(
      p,
      'gdnGating',
      N,
      H,
      a.buffer[BUFFER_HANDLE],
      a.byteOffset,
      b.buffer[BUFFER_HANDLE],
      b.byteOffset,
      aLog.buffer[BUFFER_HANDLE],
      aLog.byteOffset,
      dtBias.buffer[BUFFER_HANDLE],
      dtBias.byteOffset,
      r.g.buffer[BUFFER_HANDLE],
      0,
      r.beta.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}

/** Gradients of gdnGating: da, db (shape of a), daLog and ddtBias [H]. */
export function gdnGatingBackward(
  dg: Tensor,
  dbeta: Tensor,
  a: Tensor,
  b: Tensor,
  aLog: Tensor,
  dtBias: Tensor,
  options?: KernelOptions,
): { da: Tensor; db: Tensor; daLog: Tensor; ddtBias: Tensor } {
  const fn = 'gdnGatingBackward';
  for (const [n, t] of [
    ['dg', dg],
    ['dbeta', dbeta],
    ['a', a],
    ['b', b],
    ['aLog', aLog],
    ['dtBias', dtBias],
  ] as const)
    tensorArg(fn, t, n, 'fp32');
  const [N, H] = rows(fn, a, 'a');
  for (const [n, t] of [
    ['dg', dg],
    ['dbeta', dbeta],
    ['b', b],
  ] as const)
    shapeArg(fn, t, n, a.shape, 'shape of a');
  shapeArg(fn, aLog, 'aLog', [H], 'H');
  shapeArg(fn, dtBias, 'dtBias', [H], 'H');
  const p = gdnPlacement(fn, { dg, dbeta, a, b, aLog, dtBias }, options, []);
  return withOutputs(p.device, { da: [a.shape, 'fp32'], db: [a.shape, 'fp32'], daLog: [[H], 'fp32'], ddtBias: [[H], 'fp32'] }, (r) =>
    enqueue(
      p,
      'gdnGatingBackward',
      N,
      H,
      dg.buffer[BUFFER_HANDLE],
      dg.byteOffset,
      dbeta.buffer[BUFFER_HANDLE],
      dbeta.byteOffset,
      a.buffer[BUFFER_HANDLE],
      a.byteOffset,
      b.buffer[BUFFER_HANDLE],
      b.byteOffset,
      aLog.buffer[BUFFER_HANDLE],
      aLog.byteOffset,
      dtBias.buffer[BUFFER_HANDLE],
      dtBias.byteOffset,
      r.da.buffer[BUFFER_HANDLE],
      0,
      r.db.buffer[BUFFER_HANDLE],
      0,
      r.daLog.buffer[BUFFER_HANDLE],
      0,
      r.ddtBias.buffer[BUFFER_HANDLE],
      0,
    ),
  );
}
