/**
 * Model kernels (src/model/kernels, native/kernels/model): for every kernel,
 * fast vs reference parity on random inputs with odd sizes, the forward against a
 * plain fp64 JS definition (test/helpers/model-ref.ts), every backward against
 * central finite differences of that definition, and known-value tests. Failures
 * that depend on device data (bad ids, offsets, lengths, targets) must surface as
 * a StreamError when the op runs, never as a host sync.
 *
 * Tolerances: fp32 kernels vs fp64 JS use |got - want| <= atol + rtol * |want| with
 * atol = rtol = 2e-5 for forwards of short sums, 1e-4 for gradients (FD step 1e-6 in
 * fp64 is exact to ~1e-9, so the bound is the fp32 rounding of the kernel). Fast vs
 * reference: 2e-5 (the fast kernels use a ~2 ulp polynomial exp and fp32 sums).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Device, Tensor, loadNative, type KernelImpl, type Stream } from '../src/runtime/device/device-index.js';
import { StreamError, InvalidArgumentError } from '../src/runtime/errors.js';
import * as K from '../src/model/kernels/index.js';
import * as R from './helpers/model-ref.js';
import { expectEachRefused } from './helpers/refused.js';

const d = Device.get(0);
const IMPLS: KernelImpl[] = ['fast', 'reference'];

/** Stream that f32() / i32() upload on (set by expectStreamError for its fresh stream). */
let uploadStream: Stream | undefined;
const f32 = (data: ArrayLike<number>, shape: number[]): Tensor => Tensor.fromArray(d, Float32Array.from(data), shape, { stream: uploadStream });
const i32 = (data: ArrayLike<number>, shape: number[]): Tensor => Tensor.fromArray(d, Int32Array.from(data), shape, { stream: uploadStream });
const host = async (t: Tensor): Promise<number[]> => Array.from(await t.toArray(), Number);

function close(got: ArrayLike<number>, want: ArrayLike<number>, tol: number, label: string): void {
  expect(got.length, `${label}: length`).toBe(want.length);
  let worst = 0,
    at = -1;
  for (let i = 0; i < want.length; i++) {
    const diff = Math.abs(got[i]! - want[i]!);
    const err = diff === 0 ? 0 : diff / (tol + tol * Math.abs(want[i]!));
    if (!(err <= worst)) {
      worst = err;
      at = i;
    }
  }
  if (!(worst <= 1)) throw new Error(`${label}: mismatch at ${at}: got ${got[at]} want ${want[at]} (tol ${tol})`);
}

/** Runs `make` with both impls; checks they agree and returns the fast result's host arrays. */
async function parity(make: (impl: KernelImpl) => Tensor[], tol: number, label: string): Promise<number[][]> {
  const [fast, ref] = [make('fast'), make('reference')];
  const out: number[][] = [];
  for (let i = 0; i < fast.length; i++) {
    const a = await host(fast[i]!),
      b = await host(ref[i]!);
    close(a, b, tol, `${label}[${i}] fast vs reference`);
    out.push(a);
  }
  for (const t of [...fast, ...ref]) t.release();
  return out;
}

/**
 * Fast vs reference attention forward and backward at batch B, sequence S, 4 query and 2 KV heads
 * of dim D, on random inputs from `seeds` (q, k, v, dO).
 */
async function attentionParity(B: number, S: number, D: number, seeds: readonly [number, number, number, number]): Promise<void> {
  const q = f32(R.rand(B * S * 4 * D, seeds[0]), [B, S, 4, D]),
    k = f32(R.rand(B * S * 2 * D, seeds[1]), [B, S, 2, D]);
  const v = f32(R.rand(B * S * 2 * D, seeds[2]), [B, S, 2, D]),
    dO = f32(R.rand(B * S * 4 * D, seeds[3]), [B, S, 4, D]);
  const { o, lse } = K.attention(q, k, v, { impl: 'reference' });
  await parity(
    (impl) => {
      const r = K.attention(q, k, v, { impl });
      return [r.o, r.lse];
    },
    2e-5,
    `attention S=${S} D=${D}`,
  );
  await parity((impl) => Object.values(K.attentionBackward(dO, q, k, v, o, lse, { impl })), 5e-5, `attentionBackward S=${S} D=${D}`);
}

/** A fresh stream for ops that are expected to fail (the error is sticky). */
async function expectStreamError(run: (stream: Stream) => void, pattern: RegExp): Promise<void> {
  await d.defaultStream.synchronize(); // inputs made earlier on the default stream are ready
  const s = d.newStream();
  uploadStream = s; // inputs made inside run() are uploaded in order on s
  try {
    run(s);
    const err = await s.synchronize().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StreamError);
    expect((err as Error).message).toMatch(pattern);
  } finally {
    uploadStream = undefined;
    s.destroy();
  }
}

afterAll(() => {
  loadNative().setMatmulKernel('auto');
});

describe('embedding', () => {
  it('gathers rows (fp32 and bf16) and scatter-adds the backward', async () => {
    const V = 11,
      H = 7,
      T = 9;
    const table = R.rand(V * H, 1);
    const ids = [3, 0, 10, 3, 5, 3, 9, 1, 0];
    const tt = f32(table, [V, H]),
      it32 = i32(ids, [T]);
    const [out] = await parity((impl) => [K.embedding(it32, tt, { impl })], 0, 'embedding');
    close(
      out!,
      ids.flatMap((id) => Array.from(table.subarray(id * H, id * H + H))),
      0,
      'embedding values',
    );
    const tb = Tensor.fromArray(d, table, [V, H], { dtype: 'bf16' });
    const [ob] = await parity((impl) => [K.embedding(it32, tb, { impl })], 0, 'embedding bf16');
    close(
      ob!,
      ids.flatMap((id) => Array.from(R.roundBf16(table.subarray(id * H, id * H + H)))),
      0,
      'embedding bf16 values',
    );
    const dy = R.rand(T * H, 2);
    const [dt] = await parity((impl) => [K.embeddingBackward(f32(dy, [T, H]), it32, V, { impl })], 1e-6, 'embeddingBackward');
    const want = new Float64Array(V * H);
    ids.forEach((id, t) => {
      for (let i = 0; i < H; i++) want[id * H + i] += dy[t * H + i]!;
    });
    close(dt!, want, 1e-6, 'embeddingBackward values');
    // ids of any shape: [B, S] -> [B, S, H]
    expect(K.embedding(i32(ids.slice(0, 8), [2, 4]), tt).shape).toEqual([2, 4, H]);
  });

  it('an out-of-range id fails the stream when the op runs, naming the id and its position', async () => {
    const tt = f32(R.rand(12, 3), [4, 3]);
    const before = d.stats().hostSyncs;
    for (const impl of IMPLS) {
      await expectStreamError(
        (stream) => K.embedding(i32([1, 2, 7, 0], [4]), tt, { stream, impl }),
        /token id 7 at position 2 is outside the vocabulary \[0, 4\)/,
      );
      await expectStreamError(
        (stream) => K.embeddingBackward(f32(new Float32Array(6), [2, 3]), i32([-1, 0], [2]), 4, { stream, impl }),
        /token id -1 at position 0/,
      );
    }
    expect(d.stats().hostSyncs).toBe(before);
  });

  it('validates in TS before enqueueing', () => {
    const tt = f32(R.rand(12, 3), [4, 3]),
      fids = f32([1, 2], [2]),
      ids = i32([1], [1]),
      flat = f32([1, 2, 3], [3]);
    const enq = d.defaultStream.stats().enqueued;
    const allocs = d.stats().numAllocs;
    expect(() => K.embedding(fids, tt)).toThrow(/embedding\(\) expects ids of dtype int32 but received fp32/);
    expect(() => K.embedding(ids, flat)).toThrow(/expects table of shape \[V, H\] = \[\*, \*\] but received \[3\]/);
    expect(() => K.embedding(ids, tt, { impl: 'slow' as KernelImpl })).toThrow(InvalidArgumentError);
    expect(() => K.embedding(ids, tt, { strem: 1 } as never)).toThrow(/Unknown option 'strem'/);
    expect(d.stats().numAllocs).toBe(allocs);
    expect(d.defaultStream.stats().enqueued).toBe(enq);
  });
});

describe('rmsNorm', () => {
  it('forward matches fp64 JS; backward matches finite differences', async () => {
    const T = 5,
      H = 37,
      eps = 1e-6;
    const x = R.rand(T * H, 4, 2),
      w = R.rand(H, 5, 1.5);
    const xt = f32(x, [T, H]),
      wt = f32(w, [H]);
    const [y, rstd] = await parity(
      (impl) => {
        const r = K.rmsNorm(xt, wt, eps, { impl });
        return [r.y, r.rstd];
      },
      2e-5,
      'rmsNorm',
    );
    close(y!, R.rmsNorm(x, w, T, H, eps), 2e-5, 'rmsNorm y');
    const dy = R.rand(T * H, 6);
    const { rstd: rs } = K.rmsNorm(xt, wt, eps);
    const [dx, dw] = await parity(
      (impl) => {
        const g = K.rmsNormBackward(f32(dy, [T, H]), xt, wt, rs, { impl });
        return [g.dx, g.dw];
      },
      2e-5,
      'rmsNormBackward',
    );
    close(
      dx!,
      R.fdGrad((xx) => R.rmsNorm(xx, w, T, H, eps), x, dy),
      1e-4,
      'dx vs FD',
    );
    close(
      dw!,
      R.fdGrad((ww) => R.rmsNorm(x, ww, T, H, eps), w, dy),
      1e-4,
      'dw vs FD',
    );
    expect(rstd!.length).toBe(T);
    // Leading dims: [2, 3, H] normalises over H (the q/k-norm case).
    const r3 = K.rmsNorm(f32(x.subarray(0, 2 * 2 * H), [2, 2, H]), wt, eps);
    expect(r3.rstd.shape).toEqual([2, 2]);
    close(await host(r3.y), R.rmsNorm(x, w, 4, H, eps), 2e-5, 'rmsNorm 3-D');
  });
});

describe('rope', () => {
  /** The unscaled table theta^(-2i/D), scale 1, written out here (not through rope-scaling.ts). */
  const unscaled = (theta: number, D: number): K.RopeTable => ({ invFreq: Float64Array.from({ length: D / 2 }, (_, i) => theta ** ((-2 * i) / D)), scale: 1 });

  it('rotates a unit vector by pos * theta^(-2i/D) and the backward undoes it', async () => {
    const D = 8,
      theta = 10000;
    // x = e_1 (pair (1, 1 + D/2) = (1, 5)), one head, positions 0 and 3.
    const x = new Float32Array(2 * D);
    x[1] = 1;
    x[D + 1] = 1;
    for (const impl of IMPLS) {
      const y = await host(K.rope(f32(x, [2, 1, D]), i32([0, 3], [2]), unscaled(theta, D), { impl }));
      const a = 3 * theta ** (-2 / D);
      const want = new Array(2 * D).fill(0);
      want[1] = 1;
      want[D + 1] = Math.cos(a);
      want[D + 5] = Math.sin(a);
      close(y, want, 1e-6, `rope unit vector (${impl})`);
    }
    const T = 7,
      nH = 3,
      Dh = 10;
    const xs = R.rand(T * nH * Dh, 7),
      pos = [0, 1, 2, 5, 100, 4095, 31];
    const xt = f32(xs, [T, nH, Dh]),
      pt = i32(pos, [T]);
    const [y] = await parity((impl) => [K.rope(xt, pt, unscaled(1e6, Dh), { impl })], 1e-6, 'rope');
    close(y!, R.rope(xs, pos, T, nH, Dh, 1e6), 2e-5, 'rope vs JS');
    const back = await host(K.ropeBackward(f32(y!, [T, nH, Dh]), pt, unscaled(1e6, Dh)));
    close(back, xs, 2e-5, 'ropeBackward(rope(x)) = x');
    // ropeBackward is the adjoint: check against FD of the forward.
    const g = R.rand(T * nH * Dh, 8);
    const [dx] = await parity((impl) => [K.ropeBackward(f32(g, [T, nH, Dh]), pt, unscaled(1e6, Dh), { impl })], 1e-6, 'ropeBackward');
    close(
      dx!,
      R.fdGrad((xx) => R.rope(xx, pos, T, nH, Dh, 1e6), xs, g),
      1e-4,
      'ropeBackward vs FD',
    );
    // [B, S, nH, D] with positions [B, S]
    expect(K.rope(f32(xs.subarray(0, 6 * nH * Dh), [2, 3, nH, Dh]), i32(pos.slice(0, 6), [2, 3]), unscaled(1e6, Dh)).shape).toEqual([2, 3, nH, Dh]);
    expect(() => K.rope(f32(new Float32Array(9), [1, 1, 9]), i32([0], [1]), unscaled(1e4, 8))).toThrow(/head dim D must be even/);
  });

  it('fast rope equals the reference bit for bit with its per-position table (a batch repeating positions) and without it (spread positions)', async () => {
    const nH = 2,
      Dh = 12;
    // [3, 5] positions 7..11 repeated: 5 distinct in 15 tokens (the table); then 0..4096 spread over 5 tokens (one row per token).
    for (const pos of [
      [7, 8, 9, 10, 11, 7, 8, 9, 10, 11, 7, 8, 9, 10, 11],
      [0, 4096, 17, 3, 2048],
    ]) {
      const T = pos.length;
      const xs = R.rand(T * nH * Dh, 11);
      for (const op of [K.rope, K.ropeBackward]) {
        const scaled = { ...unscaled(1e4, Dh), scale: 1.25 };
        const [f, r] = (['fast', 'reference'] as const).map((impl) => op(f32(xs, [T, nH, Dh]), i32(pos, [T]), scaled, { impl }));
        expect(await host(f!)).toEqual(await host(r!));
      }
    }
  });

  it('a scaled table: fast == reference, matches the fp64 definition, backward is scale·R^T (finite differences)', async () => {
    const T = 6,
      nH = 2,
      Dh = 12;
    // An arbitrary (yarn-like) table: not a power series of one base, scale != 1.
    const table: K.RopeTable = { invFreq: Float64Array.from([1, 0.61, 0.3, 0.071, 0.0123, 0.00042]), scale: 1.27 };
    const xs = R.rand(T * nH * Dh, 21),
      pos = [0, 1, 7, 64, 1000, 40000];
    const xt = f32(xs, [T, nH, Dh]),
      pt = i32(pos, [T]);
    const [y] = await parity((impl) => [K.rope(xt, pt, table, { impl })], 1e-6, 'scaled rope');
    close(y!, R.ropeBy(xs, pos, T, nH, Dh, table.invFreq, table.scale), 2e-5, 'scaled rope vs JS');
    // Not the unscaled rotation: dropping the table would fail here.
    expect(
      Math.max(...R.ropeBy(xs, pos, T, nH, Dh, table.invFreq, table.scale).map((v, i) => Math.abs(v - R.rope(xs, pos, T, nH, Dh, 1e4)[i]!))),
    ).toBeGreaterThan(0.1);
    const g = R.rand(T * nH * Dh, 22);
    const [dx] = await parity((impl) => [K.ropeBackward(f32(g, [T, nH, Dh]), pt, table, { impl })], 1e-6, 'scaled ropeBackward');
    close(
      dx!,
      R.fdGrad((xx) => R.ropeBy(xx, pos, T, nH, Dh, table.invFreq, table.scale), xs, g),
      1e-4,
      'scaled ropeBackward vs FD',
    );
    // backward(forward(x)) = scale² x
    const back = await host(K.ropeBackward(f32(y!, [T, nH, Dh]), pt, table));
    close(
      back,
      Array.from(xs, (v) => v * table.scale * table.scale),
      2e-5,
      'scaled round trip',
    );
  });

  it('refuses a table of the wrong length or with a bad scale, naming the fix', () => {
    const x = f32(new Float32Array(8), [1, 1, 8]),
      p = i32([0], [1]);
    expect(() => K.rope(x, p, { invFreq: new Float64Array(3), scale: 1 })).toThrow(/table\.invFreq to be a Float64Array of D\/2 = 4 finite numbers.*HINT/);
    expect(() => K.rope(x, p, { invFreq: new Float64Array([1, 0.1, NaN, 0.001]), scale: 1 })).toThrow(InvalidArgumentError);
    expect(() => K.rope(x, p, { invFreq: new Float64Array(4), scale: 0 })).toThrow(/table\.scale to be a positive finite number.*HINT/);
    expect(() => K.rope(x, p, 1e4 as unknown as K.RopeTable)).toThrow(/Float64Array/);
  });
});

describe('attention', () => {
  const B = 2,
    S = 7,
    nH = 4,
    nKV = 2,
    D = 6;
  const q = R.rand(B * S * nH * D, 11),
    k = R.rand(B * S * nKV * D, 12),
    v = R.rand(B * S * nKV * D, 13);

  it('forward (GQA, causal) matches fp64 JS, fast vs reference', async () => {
    const [o, lse] = await parity(
      (impl) => {
        const r = K.attention(f32(q, [B, S, nH, D]), f32(k, [B, S, nKV, D]), f32(v, [B, S, nKV, D]), { impl });
        return [r.o, r.lse];
      },
      2e-5,
      'attention',
    );
    const want = R.attention(q, k, v, B, S, nH, nKV, D);
    close(o!, want.o, 2e-5, 'attention o');
    close(lse!, want.lse, 2e-5, 'attention lse');
  });

  it('is causal: changing a future token does not change earlier outputs', async () => {
    const t = 4;
    const q2 = q.slice(),
      k2 = k.slice(),
      v2 = v.slice();
    for (let b = 0; b < B; b++) {
      for (let e = 0; e < nH * D; e++) q2[(b * S + t) * nH * D + e] += 3;
      for (let e = 0; e < nKV * D; e++) {
        k2[(b * S + t) * nKV * D + e] -= 2;
        v2[(b * S + t) * nKV * D + e] *= 5;
      }
    }
    for (const impl of IMPLS) {
      const o1 = await host(K.attention(f32(q, [B, S, nH, D]), f32(k, [B, S, nKV, D]), f32(v, [B, S, nKV, D]), { impl }).o);
      const o2 = await host(K.attention(f32(q2, [B, S, nH, D]), f32(k2, [B, S, nKV, D]), f32(v2, [B, S, nKV, D]), { impl }).o);
      for (let b = 0; b < B; b++) {
        for (let s = 0; s < S; s++) {
          const row = (b * S + s) * nH * D;
          const same = o1.slice(row, row + nH * D).every((x, i) => x === o2[row + i]);
          expect(same, `${impl} b=${b} s=${s}`).toBe(s < t);
        }
      }
    }
  });

  it('backward matches finite differences for dq, dk, dv (summed over the group)', async () => {
    const dO = R.rand(B * S * nH * D, 14);
    const qt = f32(q, [B, S, nH, D]),
      kt = f32(k, [B, S, nKV, D]),
      vt = f32(v, [B, S, nKV, D]);
    const { o, lse } = K.attention(qt, kt, vt, { impl: 'reference' });
    const [dq, dk, dv] = await parity(
      (impl) => {
        const g = K.attentionBackward(f32(dO, [B, S, nH, D]), qt, kt, vt, o, lse, { impl });
        return [g.dq, g.dk, g.dv];
      },
      2e-5,
      'attentionBackward',
    );
    close(
      dq!,
      R.fdGrad((x) => R.attention(x, k, v, B, S, nH, nKV, D).o, q, dO),
      1e-4,
      'dq vs FD',
    );
    close(
      dk!,
      R.fdGrad((x) => R.attention(q, x, v, B, S, nH, nKV, D).o, k, dO),
      1e-4,
      'dk vs FD',
    );
    close(
      dv!,
      R.fdGrad((x) => R.attention(q, k, x, B, S, nH, nKV, D).o, v, dO),
      1e-4,
      'dv vs FD',
    );
  });

  it('fast matches reference across query tiles and ragged head dims (S = 70, D = 20 and 40)', async () => {
    for (const [S2, D2] of [
      [70, 20],
      [33, 40],
    ] as const) {
      await attentionParity(1, S2, D2, [18, 19, 20, 21]);
    }
  });

  it('fast matches reference where AVX2 pairs query rows (o = P V, dq = dS K) and keys (dK, dV): odd and even S over 1-3 tiles, D = 8, 24, 32, 48', async () => {
    // D % 8 == 0 takes the paired path: D = 24 and 48 end in a 3- and 2-vector column block,
    // an odd S leaves a single last row and key, S > 32 spans query tiles.
    for (const [S2, D2] of [
      [7, 8],
      [31, 24],
      [32, 32],
      [64, 32],
      [70, 48],
    ] as const) {
      await attentionParity(2, S2, D2, [200 + S2, 300 + S2, 400 + D2, 500 + D2]);
    }
  });

  it('fast matches reference at every sequence length 1..20 (the score rows are computed in tiles of 4 rows x 8-key blocks)', async () => {
    // Every residue of S mod 4 (row tiles) and mod 8 (key blocks, padded transposed K), with a
    // head dim that is not a multiple of 8.
    for (let S2 = 1; S2 <= 20; S2++) {
      const D2 = S2 % 2 ? 12 : 8;
      await attentionParity(2, S2, D2, [30 + S2, 60 + S2, 90 + S2, 120 + S2]);
    }
  });

  it('decode attends to the first lengths[b] cache positions and equals the last row of full attention', async () => {
    const Smax = 9,
      lengths = [7, 3];
    const kc = R.rand(B * Smax * nKV * D, 15),
      vc = R.rand(B * Smax * nKV * D, 16);
    const qd = R.rand(B * nH * D, 17);
    const [o] = await parity(
      (impl) => [K.attentionDecode(f32(qd, [B, 1, nH, D]), f32(kc, [B, Smax, nKV, D]), f32(vc, [B, Smax, nKV, D]), i32(lengths, [B]), { impl })],
      2e-5,
      'attentionDecode',
    );
    for (let b = 0; b < B; b++) {
      // Full causal attention over L positions whose last query is qd[b]: its last row.
      const L = lengths[b]!;
      const qq = new Float32Array(L * nH * D);
      qq.set(qd.subarray(b * nH * D, (b + 1) * nH * D), (L - 1) * nH * D);
      const want = R.attention(
        qq,
        kc.subarray(b * Smax * nKV * D, (b * Smax + L) * nKV * D),
        vc.subarray(b * Smax * nKV * D, (b * Smax + L) * nKV * D),
        1,
        L,
        nH,
        nKV,
        D,
      ).o;
      close(o!.slice(b * nH * D, (b + 1) * nH * D), want.subarray((L - 1) * nH * D), 2e-5, `decode b=${b}`);
    }
    await expectStreamError(
      (stream) => K.attentionDecode(f32(qd, [B, 1, nH, D]), f32(kc, [B, Smax, nKV, D]), f32(vc, [B, Smax, nKV, D]), i32([3, 10], [B]), { stream }),
      /lengths\[1\] = 10 is outside \[0, 9\]/,
    );
  });

  it('rejects head counts that do not group', () => {
    expect(() =>
      K.attention(f32(new Float32Array(3 * 4), [1, 1, 3, 4]), f32(new Float32Array(8), [1, 1, 2, 4]), f32(new Float32Array(8), [1, 1, 2, 4])),
    ).toThrow(/query heads \(3\) must be a positive multiple of kv heads \(2\)/);
  });
});

describe('swiglu', () => {
  it('separate and fused forms match JS and finite differences', async () => {
    const N = 5,
      I = 19;
    const g = R.rand(N * I, 21, 4),
      u = R.rand(N * I, 22, 2),
      dh = R.rand(N * I, 23);
    const gt = f32(g, [N, I]),
      ut = f32(u, [N, I]);
    const [h] = await parity((impl) => [K.swiglu(gt, ut, { impl })], 2e-5, 'swiglu');
    close(
      h!,
      Array.from(g, (x, i) => R.silu(x) * u[i]!),
      2e-5,
      'swiglu values',
    );
    const [dg, du] = await parity(
      (impl) => {
        const r = K.swigluBackward(f32(dh, [N, I]), gt, ut, { impl });
        return [r.dGate, r.dUp];
      },
      2e-5,
      'swigluBackward',
    );
    close(
      dg!,
      R.fdGrad((x) => Array.from(x, (gv, i) => R.silu(gv) * u[i]!), g, dh),
      1e-4,
      'dGate vs FD',
    );
    close(
      du!,
      R.fdGrad((x) => Array.from(x, (uv, i) => R.silu(g[i]!) * uv), u, dh),
      1e-4,
      'dUp vs FD',
    );
    // fused [N, 2I]: row = gate ‖ up
    const gu = new Float32Array(N * 2 * I);
    for (let n = 0; n < N; n++) {
      gu.set(g.subarray(n * I, n * I + I), n * 2 * I);
      gu.set(u.subarray(n * I, n * I + I), n * 2 * I + I);
    }
    const gut = f32(gu, [N, 2 * I]);
    const [hf] = await parity((impl) => [K.swigluFused(gut, { impl })], 2e-5, 'swigluFused');
    close(hf!, h!, 0, 'fused = separate');
    const [dgu] = await parity((impl) => [K.swigluFusedBackward(f32(dh, [N, I]), gut, { impl })], 2e-5, 'swigluFusedBackward');
    for (let n = 0; n < N; n++) {
      close(dgu!.slice(n * 2 * I, n * 2 * I + I), dg!.slice(n * I, n * I + I), 0, 'fused dGate');
      close(dgu!.slice(n * 2 * I + I, (n + 1) * 2 * I), du!.slice(n * I, n * I + I), 0, 'fused dUp');
    }
  });
});

describe('router', () => {
  it('top-k ties go to the lower expert index, renorm divides by the selected mass', async () => {
    const z = [1, 3, 3, 0, 3, /* row 2 */ 0, 0, 0, 0, 0];
    for (const impl of IMPLS) {
      const r = K.routerTopK(f32(z, [2, 5]), 2, false, { impl });
      expect(await host(r.indices), impl).toEqual([1, 2, 0, 1]);
      const rn = K.routerTopK(f32(z, [2, 5]), 3, true, { impl });
      expect(await host(rn.indices), impl).toEqual([1, 2, 4, 0, 1, 2]);
      close(await host(rn.weights), [1 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3], 1e-6, 'renorm weights');
    }
  });

  for (const renorm of [false, true]) {
    it(`forward and backward match JS and finite differences (renorm=${renorm})`, async () => {
      const T = 6,
        E = 13,
        k = 4;
      const z = R.rand(T * E, renorm ? 31 : 32, 3);
      const zt = f32(z, [T, E]);
      const [w, idx, p] = await parity(
        (impl) => {
          const r = K.routerTopK(zt, k, renorm, { impl });
          return [r.weights, r.indices, r.probs];
        },
        2e-5,
        'routerTopK',
      );
      const want = R.router(z, T, E, k, renorm);
      expect(idx).toEqual(Array.from(want.indices));
      close(w!, want.weights, 2e-5, 'weights');
      close(p!, want.probs, 2e-5, 'probs');
      const dW = R.rand(T * k, 33);
      const r = K.routerTopK(zt, k, renorm);
      const [dz] = await parity((impl) => [K.routerBackward(f32(dW, [T, k]), r.probs, r.indices, renorm, { impl })], 2e-5, 'routerBackward');
      close(
        dz!,
        R.fdGrad((x) => R.routerWeightsFixed(x, want.indices, T, E, k, renorm), z, dW),
        1e-4,
        'dLogits vs FD',
      );
    });
  }
});

describe('MoE dispatch, gather, grouped matmul, combine', () => {
  it('dispatch sorts slots by expert, stable, on the device', async () => {
    const indices = [2, 0, 0, 1, 2, 2];
    for (const impl of IMPLS) {
      const r = K.moeDispatch(i32(indices, [3, 2]), 4, { impl });
      expect(await host(r.counts)).toEqual([2, 1, 3, 0]);
      expect(await host(r.offsets)).toEqual([0, 2, 3, 6, 6]);
      expect(await host(r.order)).toEqual([1, 2, 3, 0, 4, 5]);
    }
    const big = R.randInt(97 * 3, 41, 0, 7);
    await parity(
      (impl) => {
        const r = K.moeDispatch(i32(big, [97, 3]), 7, { impl });
        return [r.counts, r.offsets, r.order];
      },
      0,
      'moeDispatch',
    );
    await expectStreamError((stream) => K.moeDispatch(i32([0, 4, 1, 2], [2, 2]), 4, { stream }), /indices\[1\] = 4 is not an expert in \[0, 4\)/);
  });

  it('gather / combine and their backward match JS and finite differences', async () => {
    const T = 5,
      k = 3,
      H = 9,
      E = 4;
    const indices = R.randInt(T * k, 42, 0, E);
    const { order } = R.dispatch(indices, E);
    const x = R.rand(T * H, 43),
      ys = R.rand(T * k * H, 44),
      w = R.rand(T * k, 45);
    const ot = i32(order, [T * k]);
    const [xs] = await parity((impl) => [K.moeGather(f32(x, [T, H]), ot, k, { impl })], 0, 'moeGather');
    const gatherJS = (xx: ArrayLike<number>): number[] => order.flatMap((s) => Array.from({ length: H }, (_, i) => xx[Math.floor(s / k) * H + i]!));
    close(xs!, gatherJS(x), 0, 'gather values');
    const dxs = R.rand(T * k * H, 46);
    const [dx] = await parity((impl) => [K.moeGatherBackward(f32(dxs, [T * k, H]), ot, k, { impl })], 1e-6, 'moeGatherBackward');
    close(dx!, R.fdGrad(gatherJS, x, dxs), 1e-4, 'gather dx vs FD');
    const combineJS = (yy: ArrayLike<number>, ww: ArrayLike<number>): Float64Array => {
      const y = new Float64Array(T * H);
      order.forEach((s, r) => {
        for (let i = 0; i < H; i++) y[Math.floor(s / k) * H + i] += ww[s]! * yy[r * H + i]!;
      });
      return y;
    };
    const [y] = await parity((impl) => [K.moeCombine(f32(ys, [T * k, H]), ot, f32(w, [T, k]), { impl })], 2e-6, 'moeCombine');
    close(y!, combineJS(ys, w), 2e-5, 'combine values');
    const dy = R.rand(T * H, 47);
    const [dys, dw] = await parity(
      (impl) => {
        const g = K.moeCombineBackward(f32(dy, [T, H]), f32(ys, [T * k, H]), ot, f32(w, [T, k]), { impl });
        return [g.dYs, g.dWeights];
      },
      2e-5,
      'moeCombineBackward',
    );
    close(
      dys!,
      R.fdGrad((yy) => combineJS(yy, w), ys, dy),
      1e-4,
      'dYs vs FD',
    );
    close(
      dw!,
      R.fdGrad((ww) => combineJS(ys, ww), w, dy),
      1e-4,
      'dWeights vs FD',
    );
    await expectStreamError(
      (stream) => K.moeCombine(f32(ys, [T * k, H]), i32([...order.slice(0, -1), order[0]!], [T * k]), f32(w, [T, k]), { stream }),
      /repeats an earlier row; order must be a permutation/,
    );
  });

  for (const transB of [true, false]) {
    it(`grouped matmul forward and backward (transB=${transB}, an expert with no rows)`, async () => {
      const E = 4,
        N = 11,
        Kd = 13,
        M = 10;
      const offsets = [0, 4, 4, 9, 11];
      const x = R.rand(N * Kd, 51),
        w = R.rand(E * Kd * M, 52);
      const wShape = transB ? [E, M, Kd] : [E, Kd, M];
      const xt = f32(x, [N, Kd]),
        wt = f32(w, wShape),
        ot = i32(offsets, [E + 1]);
      const [y] = await parity((impl) => [K.groupedMatmul(xt, wt, ot, { transB, impl })], 2e-5, 'groupedMatmul');
      close(y!, R.grouped(x, w, offsets, N, Kd, M, E, transB), 2e-5, 'grouped values');
      const dy = R.rand(N * M, 53);
      const [dx, dw] = await parity(
        (impl) => {
          const g = K.groupedMatmulBackward(f32(dy, [N, M]), xt, wt, ot, { transB, impl });
          return [g.dX!, g.dW!];
        },
        2e-5,
        'groupedMatmulBackward',
      );
      close(
        dx!,
        R.fdGrad((xx) => R.grouped(xx, w, offsets, N, Kd, M, E, transB), x, dy),
        1e-4,
        'dX vs FD',
      );
      close(
        dw!,
        R.fdGrad((ww) => R.grouped(x, ww, offsets, N, Kd, M, E, transB), w, dy),
        1e-4,
        'dW vs FD',
      );
      expect(dw!.slice(Kd * M, 2 * Kd * M).every((v) => v === 0)).toBe(true);
      // bf16 inputs, fp32 accumulation
      const xb = Tensor.fromArray(d, x, [N, Kd], { dtype: 'bf16' }),
        wb = Tensor.fromArray(d, w, wShape, { dtype: 'bf16' });
      const [yb] = await parity((impl) => [K.groupedMatmul(xb, wb, ot, { transB, impl })], 2e-5, 'groupedMatmul bf16');
      close(yb!, R.grouped(R.roundBf16(x), R.roundBf16(w), offsets, N, Kd, M, E, transB), 2e-5, 'grouped bf16 values');
      const dyb = Tensor.fromArray(d, dy, [N, M], { dtype: 'bf16' });
      const [dxb] = await parity(
        (impl) => {
          const g = K.groupedMatmulBackward(dyb, xb, wb, ot, { transB, impl });
          return [g.dX!, g.dW!];
        },
        2e-5,
        'groupedMatmulBackward bf16',
      );
      close(
        dxb!,
        R.fdGrad((xx) => R.grouped(xx, R.roundBf16(w), offsets, N, Kd, M, E, transB), x, R.roundBf16(dy)),
        1e-4,
        'bf16 dX vs FD',
      );
      const onlyDW = K.groupedMatmulBackward(f32(dy, [N, M]), xt, wt, ot, { transB, dX: false });
      expect(onlyDW.dX).toBeUndefined();
      close(await host(onlyDW.dW!), dw!, 2e-5, 'dW alone');
    });
  }

  it('bad offsets fail the stream when the op runs', async () => {
    const xt = f32(new Float32Array(6), [3, 2]),
      wt = f32(new Float32Array(8), [2, 2, 2]);
    await expectStreamError((stream) => K.groupedMatmul(xt, wt, i32([0, 2, 4], [3]), { stream }), /offsets \[0, 2, 4\] must rise from 0 to the row count 3/);
    expect(() => K.groupedMatmul(xt, f32(new Float32Array(8), [2, 4, 1]), i32([0, 1, 3], [3]))).toThrow(
      /expects w of shape \[E, M, K = x cols\] = \[2, 4, 2\] but received \[2, 4, 1\]/,
    );
  });
});

describe('log-softmax, cross-entropy, token log-probs', () => {
  const T = 6,
    V = 37;
  const z = R.rand(T * V, 61, 5);
  const targets = [3, -100, 0, 36, 17, 5];

  it('matches JS, ignores -100, and the backward matches finite differences', async () => {
    const zt = f32(z, [T, V]),
      tt = i32(targets, [T]);
    const [ls] = await parity((impl) => [K.logSoftmax(zt, { impl })], 2e-5, 'logSoftmax');
    for (let t = 0; t < T; t++) {
      const { lse } = R.logSoftmaxRow(z, t, V);
      close(
        ls!.slice(t * V, t * V + V),
        Array.from(z.subarray(t * V, t * V + V), (x) => x - lse),
        2e-5,
        'logSoftmax values',
      );
    }
    const [loss, lse] = await parity(
      (impl) => {
        const r = K.crossEntropy(zt, tt, { impl });
        return [r.loss, r.lse];
      },
      2e-5,
      'crossEntropy',
    );
    close(loss!, R.crossEntropy(z, targets, T, V), 2e-5, 'loss');
    expect(loss![1]).toBe(0);
    const [lp] = await parity((impl) => [K.tokenLogprobs(zt, tt, { impl })], 2e-5, 'tokenLogprobs');
    close(
      lp!,
      loss!.map((l) => -l),
      2e-5,
      'logprobs = -loss',
    );
    const dl = R.rand(T, 62);
    const r = K.crossEntropy(zt, tt);
    const [dz] = await parity((impl) => [K.crossEntropyBackward(f32(dl, [T]), zt, tt, r.lse, { impl })], 2e-5, 'crossEntropyBackward');
    close(
      dz!,
      R.fdGrad((x) => R.crossEntropy(x, targets, T, V), z, dl),
      1e-4,
      'dLogits vs FD',
    );
    expect(dz!.slice(V, 2 * V).every((x) => x === 0)).toBe(true);
    const { lse: lse2 } = K.tokenLogprobsWithLse(zt, tt);
    const dlp = await host(K.tokenLogprobsBackward(f32(dl, [T]), zt, tt, lse2));
    close(
      dlp,
      dz!.map((x) => -x),
      1e-6,
      'tokenLogprobsBackward = -crossEntropyBackward',
    );
    expect(lse!.length).toBe(T);
  });

  it('temperature divides the logits inside the kernel (forward, logprobs, backward vs FD)', async () => {
    const zt = f32(z, [T, V]),
      tt = i32(targets, [T]),
      temperature = 0.7;
    const zs = Array.from(z, (x) => x / temperature);
    const [loss, lse] = await parity(
      (impl) => {
        const r = K.crossEntropy(zt, tt, { temperature, impl });
        return [r.loss, r.lse];
      },
      2e-5,
      'crossEntropy T=0.7',
    );
    close(loss!, R.crossEntropy(zs, targets, T, V), 2e-5, 'loss at temperature');
    const [lp] = await parity((impl) => [K.tokenLogprobs(zt, tt, { temperature, impl })], 2e-5, 'tokenLogprobs T=0.7');
    close(
      lp!,
      loss!.map((l) => -l),
      2e-5,
      'logprobs at temperature',
    );
    const dl = R.rand(T, 63),
      lseT = f32(lse!, [T]);
    const [dz] = await parity((impl) => [K.crossEntropyBackward(f32(dl, [T]), zt, tt, lseT, { temperature, impl })], 2e-5, 'crossEntropyBackward T=0.7');
    close(
      dz!,
      R.fdGrad(
        (x) =>
          R.crossEntropy(
            Array.from(x, (v) => v / temperature),
            targets,
            T,
            V,
          ),
        z,
        dl,
      ),
      1e-4,
      'dLogits at temperature vs FD',
    );
    expect(() => K.crossEntropy(zt, tt, { temperature: 0 })).toThrow(/expects a finite number > 0 for temperature/);
  });

  it('a target outside the vocabulary fails the stream', async () => {
    await expectStreamError(
      (stream) => K.crossEntropy(f32(z, [T, V]), i32([0, 1, 37, 2, 3, 4], [T]), { stream }),
      /target 37 at position 2 is outside the vocabulary \[0, 37\) and is not the ignore index -100/,
    );
  });
});

describe('adamw', () => {
  it('matches torch.optim.AdamW in fp64 over three steps, fast vs reference', async () => {
    const n = 29,
      lr = 1e-2,
      beta1 = 0.9,
      beta2 = 0.95,
      eps = 1e-8,
      weightDecay = 0.1;
    const p0 = R.rand(n, 71),
      grads = [R.rand(n, 72), R.rand(n, 73), R.rand(n, 74)];
    const want = Float64Array.from(p0),
      m = new Float64Array(n),
      v = new Float64Array(n);
    for (let s = 1; s <= 3; s++) {
      for (let i = 0; i < n; i++) {
        const g = grads[s - 1]![i]!;
        want[i]! *= 1 - lr * weightDecay;
        m[i] = beta1 * m[i]! + (1 - beta1) * g;
        v[i] = beta2 * v[i]! + (1 - beta2) * g * g;
        want[i] -= ((lr / (1 - beta1 ** s)) * m[i]!) / (Math.sqrt(v[i]!) / Math.sqrt(1 - beta2 ** s) + eps);
      }
    }
    const results: number[][] = [];
    for (const impl of IMPLS) {
      const p = f32(p0, [n]),
        mt = Tensor.zeros(d, [n]),
        vt = Tensor.zeros(d, [n]);
      for (let s = 1; s <= 3; s++) K.adamw(p, f32(grads[s - 1]!, [n]), mt, vt, { lr, beta1, beta2, eps, weightDecay, step: s, impl });
      results.push(await host(p));
    }
    close(results[0]!, results[1]!, 1e-6, 'adamw fast vs reference');
    close(results[0]!, want, 1e-5, 'adamw vs fp64');
    expect(() => K.adamw(f32(p0, [n]), f32(p0, [n]), f32(p0, [n]), f32(p0, [n]), { lr, step: 0 })).toThrow(/expects an integer >= 1 for step/);
  });
});

describe('sampling', () => {
  it('Philox4x32-10 matches the Random123 known-answer vectors', () => {
    expect(K.philox4x32([0, 0], [0, 0, 0, 0])).toEqual([0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
    const f = 0xffffffff;
    expect(K.philox4x32([f, f], [f, f, f, f])).toEqual([0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]);
    expect(K.philox4x32([0xa4093822, 0x299f31d0], [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344])).toEqual([0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]);
  });

  it('temperature 0 is argmax (ties -> lower index)', async () => {
    const z = [0, 2, 1, 2, /* */ -1, -3, -1, -2];
    for (const impl of IMPLS) expect(await host(K.sample(f32(z, [2, 4]), { temperature: 0, seed: 5, impl }))).toEqual([1, 0]);
  });

  it('a fixed seed and offset give fixed draws on any stream and impl; another offset gives others', async () => {
    const B = 64,
      V = 50;
    const zt = f32(R.rand(B * V, 81, 2), [B, V]);
    const opts = { temperature: 0.8, topK: 20, topP: 0.9, seed: 2 ** 40 + 123, offset: 7 };
    const a = await host(K.sample(zt, opts));
    const s = d.newStream();
    await d.defaultStream.synchronize(); // zt is written on the default stream
    const bt = K.sample(zt, { ...opts, stream: s, impl: 'reference' });
    const b = Array.from(await bt.toArray({ stream: s }));
    s.destroy();
    expect(b).toEqual(a);
    const c = await host(K.sample(zt, { ...opts, offset: 8 }));
    expect(c).not.toEqual(a);
    const full = await parity((impl) => [K.sample(zt, { temperature: 1.3, seed: 9, impl })], 0, 'sample no cut');
    expect(full[0]!.every((t) => t >= 0 && t < V)).toBe(true);
    // A large vocabulary where the nucleus holds hundreds to thousands of tokens (the
    // fast path grows its selection) and ties between logits: still identical draws.
    const big = R.rand(16 * 3001, 82, 3).map((v, i) => (i % 7 === 0 ? 1 : v));
    const bt2 = f32(big, [16, 3001]);
    for (const o of [{ topP: 0.95 }, { topP: 0.3, temperature: 0.5 }, { topK: 500, topP: 0.9 }, { topK: 3000 }, {}]) {
      await parity((impl) => [K.sample(bt2, { ...o, seed: 77, offset: 3, impl })], 0, `sample ${JSON.stringify(o)}`);
    }
  });

  it('empirical frequencies match the distribution', async () => {
    const probs = [0.1, 0.2, 0.3, 0.4],
      B = 4000;
    const z = Array.from({ length: B }, () => probs.map(Math.log)).flat();
    const out = await host(K.sample(f32(z, [B, 4]), { seed: 1234 }));
    const freq = probs.map((_, i) => out.filter((t) => t === i).length / B);
    // 4000 draws: the standard error of each frequency is <= 0.008; allow 4 sigma.
    freq.forEach((f, i) => expect(Math.abs(f - probs[i]!), `token ${i}: ${f}`).toBeLessThan(0.032));
    // temperature 2 flattens: p ~ sqrt(probs)
    const flat = await host(K.sample(f32(z, [B, 4]), { seed: 99, temperature: 2 }));
    const sq = probs.map(Math.sqrt),
      tot = sq.reduce((x, y) => x + y, 0);
    sq.forEach((s, i) => expect(Math.abs(flat.filter((t) => t === i).length / B - s / tot)).toBeLessThan(0.032));
  });

  it('top-k and top-p never pick excluded tokens', async () => {
    const probs = [0.05, 0.5, 0.15, 0.3],
      B = 2000;
    const z = f32(Array.from({ length: B }, () => probs.map(Math.log)).flat(), [B, 4]);
    for (const impl of IMPLS) {
      const k2 = await host(K.sample(z, { topK: 2, seed: 3, impl }));
      expect(new Set(k2)).toEqual(new Set([1, 3]));
      // top-p 0.7: 0.5 < 0.7 <= 0.8 keeps tokens 1 and 3
      const p7 = await host(K.sample(z, { topP: 0.7, seed: 4, impl }));
      expect(new Set(p7)).toEqual(new Set([1, 3]));
      const p1 = await host(K.sample(z, { topP: 0.4, topK: 3, seed: 5, impl }));
      expect(new Set(p1)).toEqual(new Set([1]));
      const k3 = await host(K.sample(z, { topK: 3, topP: 0.999, seed: 6, impl }));
      expect(k3.includes(0)).toBe(false);
    }
    expect(() => K.sample(z, { topP: 0 })).toThrow(/topP/);
    expect(() => K.sample(z, { temprature: 1 } as never)).toThrow(/Unknown option 'temprature'/);
  });
});

describe('portable primitives (no AVX2)', () => {
  it('fast kernels on the portable vector path still match the reference', async () => {
    const native = loadNative();
    native.setMatmulKernel('portable');
    try {
      const T = 3,
        V = 45,
        H = 21;
      const z = f32(R.rand(T * V, 91, 4), [T, V]);
      await parity(
        (impl) => {
          const r = K.crossEntropy(z, i32([1, 44, 0], [T]), { impl });
          return [r.loss, r.lse];
        },
        2e-5,
        'portable crossEntropy',
      );
      await parity((impl) => [K.rmsNorm(f32(R.rand(T * H, 92), [T, H]), f32(R.rand(H, 93), [H]), 1e-6, { impl }).y], 2e-5, 'portable rmsNorm');
      await parity((impl) => [K.swiglu(f32(R.rand(T * H, 94, 3), [T, H]), f32(R.rand(T * H, 95), [T, H]), { impl })], 2e-5, 'portable swiglu');
      const q = f32(R.rand(2 * 5 * 2 * 8, 96), [2, 5, 2, 8]),
        kv = f32(R.rand(2 * 5 * 8, 97), [2, 5, 1, 8]);
      await parity((impl) => [K.attention(q, kv, kv, { impl }).o], 2e-5, 'portable attention');
      const a = K.attention(q, kv, kv, { impl: 'reference' });
      await parity((impl) => Object.values(K.attentionBackward(q, q, kv, kv, a.o, a.lse, { impl })), 5e-5, 'portable attentionBackward');
      const p = f32(R.rand(37, 98), [37]);
      await parity(
        (impl) => {
          const pp = f32(R.rand(37, 98), [37]);
          K.adamw(pp, p, Tensor.zeros(d, [37]), Tensor.zeros(d, [37]), { lr: 0.1, step: 1, impl });
          return [pp];
        },
        1e-6,
        'portable adamw',
      );
    } finally {
      native.setMatmulKernel('auto');
    }
  });
});

describe('argument validation', () => {
  it('is synchronous, names the argument and shape, and enqueues / allocates nothing', () => {
    const z = (shape: number[]): Tensor => Tensor.zeros(d, shape);
    const zi = (shape: number[]): Tensor => Tensor.zeros(d, shape, 'int32');
    const q = z([1, 4, 4, 8]),
      kv = z([1, 4, 2, 8]),
      logits = z([3, 5]),
      order = zi([6]),
      x = z([3, 4]),
      gu = z([3, 5]);
    const w = z([2, 6, 4]),
      off = zi([3]),
      t3 = zi([3]),
      t4 = zi([4]),
      vBad = z([1, 4, 2, 4]),
      w5 = z([5]),
      v43 = z([4, 3]);
    const enq = d.defaultStream.stats().enqueued,
      allocs = d.stats().numAllocs;
    const cases: [() => unknown, RegExp][] = [
      [() => K.attention(q, kv, vBad), /attention\(\) expects v of shape \[B, S, nKV, D\] = \[1, 4, 2, 8\] but received \[1, 4, 2, 4\]/],
      [() => K.routerTopK(logits, 6, true), /k \(6\) must be at most the number of experts E \(5\)/],
      [() => K.routerTopK(logits, 2, 'yes' as never), /expects a boolean for renorm/],
      [() => K.moeGather(x, order, 3), /moeGather\(\) expects order of shape \[T \* k\] = \[9\] but received \[6\]/],
      [() => K.groupedMatmul(x, w, t4), /expects offsets of shape \[E \+ 1\] = \[3\] but received \[4\]/],
      [() => K.groupedMatmul(x, w, off, { outDtype: 'int32' }), /outDtype must be fp32 or bf16/],
      [() => K.groupedMatmul(x, w, off, { transB: 1 } as never), /expects a boolean for transB/],
      [() => K.crossEntropy(logits, t4), /expects targets of shape \[T\] = \[3\] but received \[4\]/],
      [() => K.crossEntropy(logits, t3, { ignoreIndex: 0.5 }), /ignoreIndex/],
      [() => K.swigluFused(gu), /last dim of gateUp must be even/],
      [() => K.rmsNorm(x, w5), /expects w of shape \[H\] = \[4\] but received \[5\]/],
      [() => K.sample(logits, { temperature: -1 }), /temperature/],
      [() => K.sample(logits, { seed: -3 }), /seed/],
      [() => K.adamw(x, x, x, v43, { lr: 1e-3, step: 1 }), /expects v of shape \[shape of param\] = \[3, 4\] but received \[4, 3\]/],
    ];
    expectEachRefused(cases);
    expect(d.defaultStream.stats().enqueued).toBe(enq);
    expect(d.stats().numAllocs).toBe(allocs);
  });
});

describe('empty shapes', () => {
  it('every kernel accepts zero tokens / rows / cache length', async () => {
    const z = (shape: number[]): Tensor => Tensor.zeros(d, shape);
    const zi = (shape: number[]): Tensor => Tensor.zeros(d, shape, 'int32');
    const disp = K.moeDispatch(zi([0, 2]), 4);
    K.rmsNorm(z([0, 8]), z([8]));
    K.attention(z([1, 0, 2, 4]), z([1, 0, 1, 4]), z([1, 0, 1, 4]));
    K.attentionBackward(z([1, 0, 2, 4]), z([1, 0, 2, 4]), z([1, 0, 1, 4]), z([1, 0, 1, 4]), z([1, 0, 2, 4]), z([1, 2, 0]));
    K.groupedMatmul(z([0, 8]), z([4, 6, 8]), disp.offsets);
    const g = K.groupedMatmulBackward(z([0, 6]), z([0, 8]), z([4, 6, 8]), disp.offsets);
    K.moeGather(z([0, 8]), disp.order, 2);
    K.moeCombine(z([0, 8]), disp.order, z([0, 2]));
    K.sample(z([0, 10]));
    K.crossEntropy(z([0, 10]), zi([0]));
    K.embedding(zi([0]), z([5, 3]));
    K.swigluFused(z([0, 6]));
    K.rope(z([0, 2, 4]), zi([0]), { invFreq: Float64Array.from([1, 0.01]), scale: 1 });
    expect(Array.from(await g.dW!.toArray()).every((v) => v === 0)).toBe(true);
    expect(Array.from(await disp.offsets.toArray())).toEqual([0, 0, 0, 0, 0]);
    const o = K.attentionDecode(f32(R.rand(16, 1), [2, 1, 2, 4]), z([2, 0, 1, 4]), z([2, 0, 1, 4]), zi([2]));
    expect(Array.from(await o.toArray())).toEqual(new Array(16).fill(0));
  });
});
