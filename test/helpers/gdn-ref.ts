/** Plain fp64 JS definitions of the Gated DeltaNet kernels (the recurrence, conv1d, gated norm, gating), for tests. */

export interface GdnShape {
  B: number;
  T: number;
  Hk: number;
  Hv: number;
  Dk: number;
  Dv: number;
}

/** The gated delta rule token by token; returns o [B,T,Hv,Dv] followed by the final state [B,Hv,Dk,Dv] in one array. */
export function gdn(
  s: GdnShape,
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  g: ArrayLike<number>,
  beta: ArrayLike<number>,
  h0: ArrayLike<number> | null,
  mask: ArrayLike<number> | null,
  l2 = true,
): Float64Array {
  const { B, T, Hk, Hv, Dk, Dv } = s;
  const o = new Float64Array(B * T * Hv * Dv + B * Hv * Dk * Dv);
  const fin = B * T * Hv * Dv;
  const scale = 1 / Math.sqrt(Dk);
  const norm = (x: ArrayLike<number>, off: number, mul: number): number[] => {
    let ss = 0;
    for (let i = 0; i < Dk; i++) ss += x[off + i]! * x[off + i]!;
    const r = l2 ? 1 / Math.sqrt(ss + 1e-6) : 1;
    return Array.from({ length: Dk }, (_, i) => x[off + i]! * r * mul);
  };
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < Hv; h++) {
      const hk = Math.floor(h / (Hv / Hk));
      const S = new Float64Array(Dk * Dv);
      if (h0) for (let i = 0; i < Dk * Dv; i++) S[i] = h0[(b * Hv + h) * Dk * Dv + i]!;
      for (let t = 0; t < T; t++) {
        if (mask && mask[b * T + t] === 0) continue;
        const kn = norm(k, ((b * T + t) * Hk + hk) * Dk, 1),
          qn = norm(q, ((b * T + t) * Hk + hk) * Dk, scale);
        const row = (b * T + t) * Hv + h;
        const a = Math.exp(g[row]!);
        for (let i = 0; i < Dk * Dv; i++) S[i] *= a;
        for (let j = 0; j < Dv; j++) {
          let kv = 0;
          for (let i = 0; i < Dk; i++) kv += S[i * Dv + j]! * kn[i]!;
          const d = beta[row]! * (v[row * Dv + j]! - kv);
          for (let i = 0; i < Dk; i++) S[i * Dv + j] += kn[i]! * d;
        }
        for (let j = 0; j < Dv; j++) {
          let acc = 0;
          for (let i = 0; i < Dk; i++) acc += S[i * Dv + j]! * qn[i]!;
          o[row * Dv + j] = acc;
        }
      }
      for (let i = 0; i < Dk * Dv; i++) o[fin + (b * Hv + h) * Dk * Dv + i] = S[i]!;
    }
  }
  return o;
}

const silu = (x: number): number => x / (1 + Math.exp(-x));

/** Causal depthwise conv1d, x [B,T,C], w [C,K], state [B,C,K-1]; returns y then the next state. */
export function causalConv(
  B: number,
  T: number,
  C: number,
  K: number,
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  s0: ArrayLike<number> | null,
  act = true,
): Float64Array {
  const out = new Float64Array(B * T * C + B * C * (K - 1));
  const xin = (b: number, s: number, c: number): number => (s >= 0 ? x[(b * T + s) * C + c]! : s0 ? s0[(b * C + c) * (K - 1) + K - 1 + s]! : 0);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      for (let c = 0; c < C; c++) {
        let pre = 0;
        for (let j = 0; j < K; j++) pre += w[c * K + j]! * xin(b, t - (K - 1) + j, c);
        out[(b * T + t) * C + c] = act ? silu(pre) : pre;
      }
    }
    for (let c = 0; c < C; c++) for (let j = 0; j < K - 1; j++) out[B * T * C + (b * C + c) * (K - 1) + j] = xin(b, T - (K - 1) + j, c);
  }
  return out;
}

/** y = x * rsqrt(mean(x^2) + eps) * w * silu(z) over rows of width H. */
export function gatedRmsNorm(N: number, H: number, x: ArrayLike<number>, z: ArrayLike<number>, w: ArrayLike<number>, eps: number): Float64Array {
  const y = new Float64Array(N * H);
  for (let n = 0; n < N; n++) {
    let ss = 0;
    for (let i = 0; i < H; i++) ss += x[n * H + i]! ** 2;
    const r = 1 / Math.sqrt(ss / H + eps);
    for (let i = 0; i < H; i++) y[n * H + i] = x[n * H + i]! * r * w[i]! * silu(z[n * H + i]!);
  }
  return y;
}

/** g = -exp(aLog) softplus(a + dtBias) then beta = sigmoid(b), concatenated. */
export function gdnGating(N: number, H: number, a: ArrayLike<number>, b: ArrayLike<number>, aLog: ArrayLike<number>, dt: ArrayLike<number>): Float64Array {
  const out = new Float64Array(2 * N * H);
  for (let n = 0; n < N; n++) {
    for (let h = 0; h < H; h++) {
      const x = a[n * H + h]! + dt[h]!;
      out[n * H + h] = -Math.exp(aLog[h]!) * (x > 20 ? x : Math.log1p(Math.exp(x)));
      out[N * H + n * H + h] = 1 / (1 + Math.exp(-b[n * H + h]!));
    }
  }
  return out;
}
