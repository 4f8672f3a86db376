/**
 * Model kernels: fast vs reference time per kernel in the same run
 * (`npm run bench -- model-kernels [--quick]`). One stream = one thread, so the
 * ratio is the single-thread speedup of the fast kernel (cache-friendly loops,
 * AVX2/FMA primitives, blocked matmul) over the plain reference loops. Rows go
 * through the public API, so they include allocating the outputs: the device pool
 * returns large freed blocks to the OS (MADV_DONTNEED), and first-touch page faults
 * on fresh outputs dominate the memory-bound kernels (rmsNorm 256x1024: ~0.06 ms of
 * kernel in ~0.7 ms per call).
 */
import { Device, Tensor, type KernelImpl, kernels as K, ropeTable } from '../src/internal.js';
import { checkFlags } from './args.js';
import { round, writeResults } from './stats.js';
import { printTable } from './table.js';

export const USAGE = `Usage: npm run bench -- model-kernels [--quick]

Fast vs reference time of every model kernel on one stream (single-thread speedup).
  --quick      half-size shapes
  -h, --help   print this help and exit
Results: bench/results/model-kernels-<date>.json (and model-kernels-latest.json).
`;

function rnd(n: number, seed: number, scale = 1): Float32Array {
  let x = seed >>> 0 || 1;
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

async function time(d: Device, run: () => Tensor[] | void, budgetMs: number): Promise<number> {
  const release = (r: Tensor[] | void): void => {
    for (const t of r ?? []) t.release();
  };
  release(run());
  await d.defaultStream.synchronize();
  const times: number[] = [];
  const t0 = performance.now();
  while (times.length < 3 || (performance.now() - t0 < budgetMs && times.length < 20)) {
    const s = performance.now();
    release(run());
    await d.defaultStream.synchronize();
    times.push(performance.now() - s);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)]!;
}

export async function main(argv: string[]): Promise<void> {
  const quick = checkFlags('model-kernels', argv, { boolean: ['--quick'] }).has('--quick');
  const d = Device.get(0);
  const f = (n: number[], seed: number, scale = 1): Tensor =>
    Tensor.fromArray(
      d,
      rnd(
        n.reduce((a, b) => a * b, 1),
        seed,
        scale,
      ),
      n,
    );
  const s = quick ? 0.5 : 1;
  const T = Math.round(256 * s),
    H = 1024,
    E = 8,
    k = 2,
    I = 512,
    V = Math.round(32000 * s),
    S = Math.round(256 * s);
  const x = f([T, H], 1),
    w = f([H], 2),
    dy = f([T, H], 3);
  const { rstd } = K.rmsNorm(x, w);
  const q = f([1, S, 8, 64], 4),
    kk = f([1, S, 2, 64], 5),
    vv = f([1, S, 2, 64], 6);
  const att = K.attention(q, kk, vv);
  const Smax = Math.round(1024 * s);
  const qd = f([8, 1, 8, 64], 19),
    kc = f([8, Smax, 2, 64], 20),
    vc = f([8, Smax, 2, 64], 21);
  const lens = Tensor.fromArray(d, new Int32Array(8).fill(Smax), [8]);
  const g = f([T, I], 7, 3),
    u = f([T, I], 8),
    dh = f([T, I], 9);
  const z = f([64, V], 10, 4),
    tg = Tensor.fromArray(
      d,
      Int32Array.from({ length: 64 }, (_, i) => (i * 997) % V),
      [64],
    );
  const ce = K.crossEntropy(z, tg);
  const rl = f([T, 64], 11, 2);
  const idx = K.routerTopK(f([T, E], 12), k, true).indices;
  const disp = K.moeDispatch(idx, E);
  const xs = K.moeGather(x, disp.order, k);
  const wgu = f([E, 2 * I, H], 13, 0.05);
  const gu = K.groupedMatmul(xs, wgu, disp.offsets);
  const dgu = f([T * k, 2 * I], 14);
  const n = Math.round(4e6 * s),
    p = f([n], 15),
    gr = f([n], 16),
    m = Tensor.zeros(d, [n]),
    v2 = Tensor.zeros(d, [n]);
  const logits8 = f([8, V], 17, 4),
    peaked8 = f([8, V], 18, 20);
  const pos = Tensor.fromArray(
    d,
    Int32Array.from({ length: T }, (_, i) => i),
    [T],
  );
  // Gated DeltaNet (Qwen3-Next head dims 128, 2 key / 4 value heads).
  const Tg = Math.round(512 * s),
    Hkg = 2,
    Hvg = 4;
  const gq = f([1, Tg, Hkg, 128], 22),
    gk = f([1, Tg, Hkg, 128], 23),
    gv = f([1, Tg, Hvg, 128], 24);
  const gg = f([1, Tg, Hvg], 25, 0.1),
    gb = f([1, Tg, Hvg], 26, 0.4);
  const dq1 = f([8, 1, Hkg, 128], 27),
    dv1 = f([8, 1, Hvg, 128], 28),
    dg1 = f([8, 1, Hvg], 29, 0.1),
    db1 = f([8, 1, Hvg], 30, 0.4);
  const dh0 = f([8, Hvg, 128, 128], 31, 0.1);
  const convC = 2 * Hkg * 128 + Hvg * 128;
  const cx = f([1, Tg, convC], 32),
    cw = f([convC, 4], 33);
  const nx = f([Tg * Hvg, 128], 34),
    nz = f([Tg * Hvg, 128], 35),
    nw = f([128], 36);

  const cases: [string, (impl: KernelImpl) => Tensor[] | void][] = [
    [`rmsNorm [${T},${H}]`, (impl) => Object.values(K.rmsNorm(x, w, 1e-6, { impl }))],
    [`rmsNormBackward [${T},${H}]`, (impl) => Object.values(K.rmsNormBackward(dy, x, w, rstd, { impl }))],
    [`rope [${T},8,128]`, (impl) => [K.rope(x.reshape([T, 8, 128]), pos, ropeTable({ rope: { type: 'default', theta: 1e6 } }, 128), { impl })]],
    [`attention B1 S${S} 8/2 heads D64`, (impl) => Object.values(K.attention(q, kk, vv, { impl }))],
    [`attentionBackward B1 S${S} 8/2 heads D64`, (impl) => Object.values(K.attentionBackward(q, q, kk, vv, att.o, att.lse, { impl }))],
    [`attentionDecode B8 cache ${Smax} 8/2 heads D64`, (impl) => [K.attentionDecode(qd, kc, vc, lens, { impl })]],
    [`swiglu [${T},${I}]`, (impl) => [K.swiglu(g, u, { impl })]],
    [`swigluBackward [${T},${I}]`, (impl) => Object.values(K.swigluBackward(dh, g, u, { impl }))],
    [`routerTopK [${T},64] k8`, (impl) => Object.values(K.routerTopK(rl, 8, true, { impl }))],
    [`groupedMatmul gate_up [${T * k},${H}]x[${E},${2 * I},${H}]`, (impl) => [K.groupedMatmul(xs, wgu, disp.offsets, { impl })]],
    [`groupedMatmulBackward gate_up`, (impl) => Object.values(K.groupedMatmulBackward(dgu, xs, wgu, disp.offsets, { impl })).filter((t): t is Tensor => !!t)],
    [`crossEntropy [64,${V}]`, (impl) => Object.values(K.crossEntropy(z, tg, { impl }))],
    [`crossEntropyBackward [64,${V}]`, (impl) => [K.crossEntropyBackward(ce.lse, z, tg, ce.lse, { impl })]],
    [`adamw n=${n}`, (impl) => K.adamw(p, gr, m, v2, { lr: 1e-4, step: 1, impl })],
    [`sample [8,${V}] topK 50 topP 0.9`, (impl) => [K.sample(logits8, { temperature: 0.7, topK: 50, topP: 0.9, seed: 1, impl })]],
    [`sample [8,${V}] plain (temperature 1)`, (impl) => [K.sample(logits8, { seed: 1, impl })]],
    [`sample [8,${V}] topP 0.9, flat logits`, (impl) => [K.sample(logits8, { temperature: 0.7, topP: 0.9, seed: 1, impl })]],
    [`sample [8,${V}] topP 0.9, peaked logits`, (impl) => [K.sample(peaked8, { temperature: 0.7, topP: 0.9, seed: 1, impl })]],
    [`gdn chunked prefill B1 T${Tg} ${Hkg}/${Hvg} heads D128`, (impl) => Object.values(K.gatedDeltaRule(gq, gk, gv, gg, gb, { impl, mode: 'chunked' }))],
    [
      `gdn decode step B8 ${Hkg}/${Hvg} heads D128 (recurrent)`,
      (impl) => Object.values(K.gatedDeltaRule(dq1, dq1, dv1, dg1, db1, { impl, mode: 'recurrent', initialState: dh0 })),
    ],
    [`gdnBackward B1 T${Tg} ${Hkg}/${Hvg} heads D128`, (impl) => Object.values(K.gatedDeltaRuleBackward(gv, gq, gk, gv, gg, gb, { impl }))],
    [`causalConv1d [${Tg},${convC}] K4`, (impl) => Object.values(K.causalConv1d(cx, cw, { impl }))],
    [`gatedRmsNorm [${Tg * Hvg},128]`, (impl) => Object.values(K.gatedRmsNorm(nx, nz, nw, 1e-6, { impl }))],
  ];
  void gu;
  // What every row pays besides its kernel: allocating outputs and one enqueue +
  // synchronize round trip to the stream thread.
  const roundTripMs = await time(d, () => [Tensor.empty(d, [T, H])], 300);
  console.log(`round trip (alloc + synchronize, no kernel): ${roundTripMs.toFixed(2)} ms`);
  const rows: { kernel: string; fastMs: number; referenceMs: number; speedup: number }[] = [];
  for (const [name, run] of cases) {
    const fastMs = await time(d, () => run('fast'), 300);
    const referenceMs = await time(d, () => run('reference'), 300);
    rows.push({ kernel: name, fastMs: round(fastMs, 3), referenceMs: round(referenceMs, 3), speedup: round(referenceMs / fastMs, 1) });
    process.stderr.write(`${name}: done\n`);
  }
  printTable(rows);
  const prefill = rows.find((r) => r.kernel.startsWith('gdn chunked prefill'))!;
  const decode = rows.find((r) => r.kernel.startsWith('gdn decode step'))!;
  const gdn = {
    prefillTokensPerSecFast: round(Tg / (prefill.fastMs / 1e3), 0),
    prefillTokensPerSecReference: round(Tg / (prefill.referenceMs / 1e3), 0),
    prefillSpeedup: prefill.speedup,
    decodeStepMsFast: decode.fastMs,
    decodeStepMsReference: decode.referenceMs,
    decodeSpeedup: decode.speedup,
  };
  console.log(
    `GDN: chunked prefill ${gdn.prefillTokensPerSecFast} tokens/s fast vs ${gdn.prefillTokensPerSecReference} reference (x${gdn.prefillSpeedup}); ` +
      `decode step ${gdn.decodeStepMsFast} ms fast vs ${gdn.decodeStepMsReference} ms reference (x${gdn.decodeSpeedup})`,
  );
  console.log(`wrote ${writeResults('model-kernels', { quick, roundTripMs: round(roundTripMs, 3), rows, gdn })}`);
}
