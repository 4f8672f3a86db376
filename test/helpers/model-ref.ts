/**
 * Plain fp64 JS definitions of the model kernels (test helper, not shipped): the
 * executable math the native kernels are checked against, plus central finite
 * differences for gradient checks.
 */

/** Deterministic values in [-scale, scale) (xorshift32). */
export function rand(n: number, seed: number, scale = 1): Float32Array {
  let x = (seed * 2654435761) >>> 0 || 1;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = ((x / 2 ** 32) * 2 - 1) * scale;
  }
  return out;
}

export function randInt(n: number, seed: number, lo: number, hi: number): Int32Array {
  const r = rand(n, seed, 1);
  return Int32Array.from(r, (v) => lo + Math.min(hi - lo - 1, Math.floor(((v + 1) / 2) * (hi - lo))));
}

/** Gradient of L(x) = sum(g * f(x)) by central differences in fp64. */
export function fdGrad(f: (x: Float64Array) => ArrayLike<number>, x: ArrayLike<number>, g: ArrayLike<number>, h = 1e-6): Float64Array {
  const xs = Float64Array.from(x);
  const out = new Float64Array(xs.length);
  const L = (): number => {
    const y = f(xs);
    let s = 0;
    for (let i = 0; i < y.length; i++) s += g[i]! * y[i]!;
    return s;
  };
  for (let i = 0; i < xs.length; i++) {
    const x0 = xs[i]!;
    xs[i] = x0 + h;
    const lp = L();
    xs[i] = x0 - h;
    const lm = L();
    xs[i] = x0;
    out[i] = (lp - lm) / (2 * h);
  }
  return out;
}

export function rmsNorm(x: ArrayLike<number>, w: ArrayLike<number>, T: number, H: number, eps: number): Float64Array {
  const y = new Float64Array(T * H);
  for (let t = 0; t < T; t++) {
    let ss = 0;
    for (let i = 0; i < H; i++) ss += x[t * H + i]! ** 2;
    const r = 1 / Math.sqrt(ss / H + eps);
    for (let i = 0; i < H; i++) y[t * H + i] = x[t * H + i]! * r * w[i]!;
  }
  return y;
}

export function rope(x: ArrayLike<number>, pos: ArrayLike<number>, T: number, nH: number, D: number, theta: number, inverse = false): Float64Array {
  const invFreq = Array.from({ length: D / 2 }, (_, i) => theta ** ((-2 * i) / D));
  return ropeBy(x, pos, T, nH, D, invFreq, 1, inverse);
}

/** Rope by an explicit table: angle pos·invFreq[i], cos and sin times `scale` (HF attention_scaling). */
export function ropeBy(
  x: ArrayLike<number>,
  pos: ArrayLike<number>,
  T: number,
  nH: number,
  D: number,
  invFreq: ArrayLike<number>,
  scale: number,
  inverse = false,
): Float64Array {
  const y = new Float64Array(T * nH * D);
  const half = D / 2;
  for (let t = 0; t < T; t++)
    for (let h = 0; h < nH; h++)
      for (let i = 0; i < half; i++) {
        const a = pos[t]! * invFreq[i]! * (inverse ? -1 : 1);
        const c = scale * Math.cos(a),
          s = scale * Math.sin(a);
        const b = (t * nH + h) * D;
        const x1 = x[b + i]!,
          x2 = x[b + i + half]!;
        y[b + i] = x1 * c - x2 * s;
        y[b + i + half] = x2 * c + x1 * s;
      }
  return y;
}

export function attention(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  B: number,
  S: number,
  nH: number,
  nKV: number,
  D: number,
): { o: Float64Array; lse: Float64Array } {
  const o = new Float64Array(B * S * nH * D),
    lse = new Float64Array(B * nH * S);
  const g = nH / nKV,
    sc = 1 / Math.sqrt(D);
  for (let b = 0; b < B; b++)
    for (let h = 0; h < nH; h++)
      for (let i = 0; i < S; i++) {
        const kh = Math.floor(h / g);
        const s: number[] = [];
        for (let j = 0; j <= i; j++) {
          let d = 0;
          for (let e = 0; e < D; e++) d += q[((b * S + i) * nH + h) * D + e]! * k[((b * S + j) * nKV + kh) * D + e]!;
          s.push(d * sc);
        }
        const m = Math.max(...s);
        const l = s.reduce((a, x) => a + Math.exp(x - m), 0);
        for (let j = 0; j <= i; j++) {
          const p = Math.exp(s[j]! - m) / l;
          for (let e = 0; e < D; e++) o[((b * S + i) * nH + h) * D + e] += p * v[((b * S + j) * nKV + kh) * D + e]!;
        }
        lse[(b * nH + h) * S + i] = m + Math.log(l);
      }
  return { o, lse };
}

export function silu(g: number): number {
  return g / (1 + Math.exp(-g));
}

export function softmaxRows(z: ArrayLike<number>, T: number, E: number): Float64Array {
  const p = new Float64Array(T * E);
  for (let t = 0; t < T; t++) {
    let m = -Infinity;
    for (let e = 0; e < E; e++) m = Math.max(m, z[t * E + e]!);
    let s = 0;
    for (let e = 0; e < E; e++) s += Math.exp(z[t * E + e]! - m);
    for (let e = 0; e < E; e++) p[t * E + e] = Math.exp(z[t * E + e]! - m) / s;
  }
  return p;
}

/** Top-k by prob desc, ties -> lower index. */
export function router(
  z: ArrayLike<number>,
  T: number,
  E: number,
  k: number,
  renorm: boolean,
): { weights: Float64Array; indices: Int32Array; probs: Float64Array } {
  const probs = softmaxRows(z, T, E);
  const weights = new Float64Array(T * k),
    indices = new Int32Array(T * k);
  for (let t = 0; t < T; t++) {
    const idx = Array.from({ length: E }, (_, e) => e).sort((a, b) => probs[t * E + b]! - probs[t * E + a]! || a - b);
    let sel = 0;
    for (let j = 0; j < k; j++) sel += probs[t * E + idx[j]!]!;
    for (let j = 0; j < k; j++) {
      indices[t * k + j] = idx[j]!;
      weights[t * k + j] = probs[t * E + idx[j]!]! / (renorm ? sel : 1);
    }
  }
  return { weights, indices, probs };
}

/** Router weights for fixed indices (what the gradient sees). */
export function routerWeightsFixed(z: ArrayLike<number>, indices: ArrayLike<number>, T: number, E: number, k: number, renorm: boolean): Float64Array {
  const probs = softmaxRows(z, T, E);
  const w = new Float64Array(T * k);
  for (let t = 0; t < T; t++) {
    let sel = 0;
    for (let j = 0; j < k; j++) sel += probs[t * E + indices[t * k + j]!]!;
    for (let j = 0; j < k; j++) w[t * k + j] = probs[t * E + indices[t * k + j]!]! / (renorm ? sel : 1);
  }
  return w;
}

/** Stable counting sort of slots by expert. */
export function dispatch(indices: ArrayLike<number>, E: number): { counts: number[]; offsets: number[]; order: number[] } {
  const counts = new Array<number>(E).fill(0);
  for (let s = 0; s < indices.length; s++) counts[indices[s]!]!++;
  const offsets = [0];
  for (let e = 0; e < E; e++) offsets.push(offsets[e]! + counts[e]!);
  const order: number[] = [];
  for (let e = 0; e < E; e++) for (let s = 0; s < indices.length; s++) if (indices[s] === e) order.push(s);
  return { counts, offsets, order };
}

/** y[rows of e] = x[rows] . w[e]^T (transB, w [E, M, K]) or x . w[e] (w [E, K, M]). */
export function grouped(
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  offsets: ArrayLike<number>,
  N: number,
  K: number,
  M: number,
  E: number,
  transB: boolean,
): Float64Array {
  const y = new Float64Array(N * M);
  for (let e = 0; e < E; e++)
    for (let r = offsets[e]!; r < offsets[e + 1]!; r++)
      for (let m = 0; m < M; m++) {
        let s = 0;
        for (let c = 0; c < K; c++) s += x[r * K + c]! * w[e * K * M + (transB ? m * K + c : c * M + m)]!;
        y[r * M + m] = s;
      }
  return y;
}

export function logSoftmaxRow(z: ArrayLike<number>, t: number, V: number): { lse: number } {
  let m = -Infinity;
  for (let i = 0; i < V; i++) m = Math.max(m, z[t * V + i]!);
  let s = 0;
  for (let i = 0; i < V; i++) s += Math.exp(z[t * V + i]! - m);
  return { lse: m + Math.log(s) };
}

export function crossEntropy(z: ArrayLike<number>, targets: ArrayLike<number>, T: number, V: number, ignore = -100): Float64Array {
  const loss = new Float64Array(T);
  for (let t = 0; t < T; t++) {
    if (targets[t] === ignore) continue;
    loss[t] = logSoftmaxRow(z, t, V).lse - z[t * V + targets[t]!]!;
  }
  return loss;
}

export function roundBf16(values: Float32Array): Float32Array {
  const u = new Uint32Array(Float32Array.from(values).buffer);
  for (let i = 0; i < u.length; i++) u[i] = ((u[i]! + 0x7fff + ((u[i]! >>> 16) & 1)) >>> 16) << 16;
  return new Float32Array(u.buffer);
}
