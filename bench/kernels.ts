/**
 * `npm run bench -- kernels`: kernel throughput beside baselines measured in the
 * same run:
 *  - matmul GFLOP/s for n = 64 … 1024 (square, fp32 and bf16 with fp32 accumulation):
 *    the fast kernel, the reference kernel, and a single-threaded OpenBLAS sgemm when
 *    libopenblas is installed (found with dlopen; `apt-get install libopenblas0-serial`);
 *  - matmul at the tiny models' real shapes (examples/models/tiny-dense and tiny-moe), fp32
 *    and bf16: each linear layer's forward A·B^T and backward A·B (dX) and A^T·B (dW), fp32
 *    against OpenBLAS with the same transposes, bf16 against fp32;
 *  - fast matmul is reported twice: wall time per op from JS (dispatch included) and the
 *    time the op held the stream's thread (onStream: the kernel, as a busy training step
 *    sees it);
 *  - every matmul row is measured `--repeats` times (fast and OpenBLAS interleaved, so a
 *    neighbour's load hits both) and reports the medians, and the load average is printed:
 *    the machine may be shared;
 *  - causal GQA attention forward and backward, fast vs reference;
 *  - the MoE grouped matmul (tokens routed to experts by device-side offsets) vs the
 *    dense matmul of the same FLOPs, and vs its reference.
 * Each square matmul row carries its target (bench/kernels-targets.ts: measured / required,
 * >= 1 holds) and bf16 rows their speed-up over fp32 of the same n; every matmul row names the
 * micro-kernel it ran on (runsOn: setMatmulKernel()'s fp32 or bf16 name).
 * Ascent kernels are timed on one stream (one native thread) as the best of a few
 * rounds of back-to-back ops, after a warm-up that lets V8 optimise the JS path first
 * (warmUpMatmulPath); OpenBLAS runs on one thread too.
 */
import os from 'node:os';
import { Device, loadNative, matmul, Tensor, type DType, type Stream, kernels as K } from '../src/internal.js';
import { BenchUsageError, checkFlags } from './args.js';
import { round, writeResults } from './stats.js';
import { printTable } from './table.js';
import { withMatmulTargets, type MatmulRow } from './kernels-targets.js';

export const USAGE = `Usage: npm run bench -- kernels [--repeats R]

Matmul GFLOP/s (fast, reference, single-thread OpenBLAS when libopenblas is installed) for
n = 64..1024 in fp32 and bf16 and at the tiny models' shapes (with the transposes backward
uses, fp32 and bf16), causal GQA attention and the MoE grouped matmul. Fast matmul is reported as wall time
per op from JS and as the time the op held the stream's thread (onStream*).
  --repeats R   measure each matmul row R times and report medians (default 3)
  -h, --help    this help
Results: bench/results/kernels-<date>.json (and kernels-latest.json).
`;

async function timeOps(stream: Stream, reps: number, rounds: number, run: () => Tensor[] | void): Promise<number> {
  const made: Tensor[] = [];
  const once = () => {
    const out = run();
    if (out) made.push(...out);
  };
  once();
  await stream.synchronize();
  let best = Infinity;
  for (let r = 0; r < rounds; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < reps; i++) once();
    await stream.synchronize();
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9 / reps);
    for (const t of made.splice(0)) t.release();
  }
  return best;
}

/**
 * Like timeOps, and also the time the ops held the stream's thread (the stream's profiler:
 * each op's start and end there), so per-op dispatch from JS is separated from the kernel.
 * In a training step the stream is kept busy and dispatch overlaps the kernels; in a loop of
 * tiny ops back to back it is not.
 */
async function timeOpsOnStream(stream: Stream, reps: number, rounds: number, run: () => Tensor): Promise<{ wall: number; onStream: number }> {
  const made: Tensor[] = [];
  made.push(run());
  await stream.synchronize();
  for (const t of made.splice(0)) t.release();
  stream.native.profile(true);
  stream.native.drainProfile();
  let wall = Infinity;
  let onStream = Infinity;
  try {
    for (let r = 0; r < rounds; r++) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < reps; i++) made.push(run());
      await stream.synchronize();
      wall = Math.min(wall, Number(process.hrtime.bigint() - t0) / 1e9 / reps);
      const p = stream.native.drainProfile();
      let us = 0;
      let ops = 0;
      for (let i = 0; i < p.names.length; i++) {
        if (p.names[i] !== 'matmul') continue;
        us += p.end[i]! - p.start[i]!;
        ops++;
      }
      if (ops !== reps) throw new Error(`bench kernels: the stream profiled ${ops} matmul ops of ${reps} (dropped ${p.dropped}); the timing would be wrong.`);
      onStream = Math.min(onStream, us / 1e6 / reps);
      for (const t of made.splice(0)) t.release();
    }
  } finally {
    stream.native.profile(false);
  }
  return { wall, onStream };
}

function randomTensor(dev: Device, shape: number[], dtype: DType, stream: Stream, seed: number): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  const a = new Float32Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    a[i] = ((x >>> 0) / 2 ** 32 - 0.5) * 0.5;
  }
  return Tensor.fromArray(dev, a, shape, { dtype, stream });
}

/**
 * Runs the path every matmul row times (the wrapper, the native call, the output tensor) until V8
 * has optimised it, before the first row. Cold, the first ~1500 calls of that path run in V8's
 * interpreter and baseline code while its optimising compiler takes the other core of a 2-core
 * machine, and the first row is n = 64 fp32 at 381 ops a round: its rounds measured that warm-up
 * (16-39 us per op in a fresh process against ~7 us once optimised, in a scratch replica of the
 * row), not the op a training loop runs thousands of times. Bounded by count and by time.
 */
async function warmUpMatmulPath(dev: Device, stream: Stream): Promise<void> {
  const ops = 4000;
  const deadline = performance.now() + 3000;
  for (const dtype of ['fp32', 'bf16'] as const) {
    const a = randomTensor(dev, [64, 64], dtype, stream, 1);
    const b = randomTensor(dev, [64, 64], dtype, stream, 2);
    for (let i = 0; i < ops && performance.now() < deadline; i++) matmul(a, b, { stream, transA: false, transB: false }).release();
    await stream.synchronize({ timeoutMs: 60_000 });
    a.release();
    b.release();
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((x, y) => x - y);
  return s[s.length >> 1]!;
}

/** A matmul shape: op(A) is [m, k], op(B) is [k, n]. */
interface Shape {
  name: string;
  m: number;
  n: number;
  k: number;
  transA: boolean;
  transB: boolean;
}

// The tiny models (hidden 128, q 4x32, kv 2x32, intermediate 384 with gate_up fused to 768,
// MoE experts 128 -> 2x128 for 512 tokens top-2 of 8 = 128 rows each) at T tokens: every
// linear's forward x·W^T, backward dX = dY·W and dW = dY^T·X.
function modelShapes(): Shape[] {
  const out: Shape[] = [];
  const linear = (what: string, t: number, inDim: number, outDim: number) => {
    out.push({ name: `${what} fwd`, m: t, n: outDim, k: inDim, transA: false, transB: true });
    out.push({ name: `${what} dX`, m: t, n: inDim, k: outDim, transA: false, transB: false });
    out.push({ name: `${what} dW`, m: outDim, n: inDim, k: t, transA: true, transB: false });
  };
  linear('q/o_proj T512', 512, 128, 128);
  linear('k/v_proj T512', 512, 128, 64);
  linear('gate_up T512', 512, 128, 768);
  linear('down T512', 512, 384, 128);
  linear('lm_head T512', 512, 128, 64);
  linear('expert gate_up T128', 128, 128, 256);
  linear('gate_up T100', 100, 128, 768);
  linear('gate_up T1000', 1000, 128, 768);
  return out;
}

export async function runKernelsBench(repeats = 3) {
  const dev = Device.get(0);
  const stream = dev.newStream();
  const native = loadNative();
  const blas = native.blasInfo();
  // The kernels this CPU runs (auto selection): the bf16 target needs AMX or AVX-512 BF16.
  const matmulKernels = native.setMatmulKernel('auto');
  // GFLOP/s of the fast kernel and OpenBLAS for one shape: medians of `repeats` interleaved measurements.
  const fastAndBlas = async (s: Shape, dtype: DType, a: Tensor, b: Tensor) => {
    const flops = 2 * s.m * s.n * s.k;
    const reps = Math.max(1, Math.round(2e8 / flops));
    const fast: number[] = [];
    const onStream: number[] = [];
    const openblas: number[] = [];
    for (let r = 0; r < repeats; r++) {
      const t = await timeOpsOnStream(stream, reps, 3, () => matmul(a, b, { stream, transA: s.transA, transB: s.transB }));
      fast.push(flops / t.wall / 1e9);
      onStream.push(flops / t.onStream / 1e9);
      if (dtype === 'fp32' && blas.available) openblas.push(flops / native.blasSgemmSeconds(s.m, s.n, s.k, reps, s.transA, s.transB) / 1e9);
    }
    return { fast: median(fast), onStream: median(onStream), openblas: openblas.length ? median(openblas) : null, reps };
  };
  await warmUpMatmulPath(dev, stream);
  const matmulRows: MatmulRow[] = [];
  for (const dtype of ['fp32', 'bf16'] as const) {
    for (const n of dtype === 'fp32' ? [64, 96, 128, 192, 256, 512, 1024] : [64, 128, 256, 512, 1024]) {
      const a = randomTensor(dev, [n, n], dtype, stream, 1);
      const b = randomTensor(dev, [n, n], dtype, stream, 2);
      const flops = 2 * n * n * n;
      const { fast, onStream, openblas, reps } = await fastAndBlas({ name: '', m: n, n, k: n, transA: false, transB: false }, dtype, a, b);
      const refReps = Math.max(1, reps >> 3);
      const reference = flops / (await timeOps(stream, refReps, n >= 512 ? 1 : 3, () => [matmul(a, b, { stream, impl: 'reference' })])) / 1e9;
      matmulRows.push({
        kernel: 'matmul',
        dtype,
        runsOn: matmulKernels[dtype],
        n,
        fastGflops: round(fast, 2),
        onStreamGflops: round(onStream, 2),
        referenceGflops: round(reference, 2),
        openblasGflops: openblas === null ? null : round(openblas, 2),
        fastVsReference: round(fast / reference, 2),
        fastVsOpenblas: openblas === null ? null : round(fast / openblas, 3),
        onStreamVsOpenblas: openblas === null ? null : round(onStream / openblas, 3),
      });
      a.release();
      b.release();
    }
  }
  const shapeRows: Array<Record<string, unknown>> = [];
  for (const s of modelShapes()) {
    let fp32Gflops = 0;
    for (const dtype of ['fp32', 'bf16'] as const) {
      const a = randomTensor(dev, s.transA ? [s.k, s.m] : [s.m, s.k], dtype, stream, 11);
      const b = randomTensor(dev, s.transB ? [s.n, s.k] : [s.k, s.n], dtype, stream, 12);
      const { fast, onStream, openblas } = await fastAndBlas(s, dtype, a, b);
      if (dtype === 'fp32') fp32Gflops = fast;
      shapeRows.push({
        kernel: 'matmul.shape',
        shape: s.name,
        dtype,
        runsOn: matmulKernels[dtype],
        mnk: `${s.m}x${s.n}x${s.k}`,
        op: `${s.transA ? 'A^T' : 'A'}·${s.transB ? 'B^T' : 'B'}`,
        fastGflops: round(fast, 2),
        onStreamGflops: round(onStream, 2),
        openblasGflops: openblas === null ? null : round(openblas, 2),
        fastVsOpenblas: openblas === null ? null : round(fast / openblas, 3),
        onStreamVsOpenblas: openblas === null ? null : round(onStream / openblas, 3),
        ...(dtype === 'bf16' ? { bf16VsFp32: round(fast / fp32Gflops, 3) } : {}),
      });
      a.release();
      b.release();
    }
  }

  // Attention: B=4, S=128, 8 query heads over 4 kv heads, D=64 (causal: half the score matrix).
  const [B, S, nH, nKV, D] = [4, 128, 8, 4, 64];
  const q = randomTensor(dev, [B, S, nH, D], 'fp32', stream, 3);
  const k = randomTensor(dev, [B, S, nKV, D], 'fp32', stream, 4);
  const v = randomTensor(dev, [B, S, nKV, D], 'fp32', stream, 5);
  const attnFlops = 2 * 2 * B * nH * ((S * (S + 1)) / 2) * D;
  const attentionRows: Array<Record<string, unknown>> = [];
  for (const impl of ['fast', 'reference'] as const) {
    const fwd = await timeOps(stream, impl === 'fast' ? 10 : 2, 3, () => {
      const r = K.attention(q, k, v, { stream, impl });
      return [r.o, r.lse];
    });
    const r = K.attention(q, k, v, { stream });
    const dO = randomTensor(dev, [B, S, nH, D], 'fp32', stream, 6);
    const bwd = await timeOps(stream, impl === 'fast' ? 5 : 1, 3, () => {
      const gr = K.attentionBackward(dO, q, k, v, r.o, r.lse, { stream, impl });
      return [gr.dq, gr.dk, gr.dv];
    });
    for (const t of [r.o, r.lse, dO]) t.release();
    attentionRows.push({
      kernel: 'attention',
      impl,
      shape: `B${B} S${S} H${nH}/${nKV} D${D}`,
      forwardMs: round(fwd * 1e3, 3),
      forwardGflops: round(attnFlops / fwd / 1e9, 2),
      backwardMs: round(bwd * 1e3, 3),
      backwardGflops: round((2 * attnFlops) / bwd / 1e9, 2),
    });
  }

  // MoE grouped matmul: T=512 tokens, top-2 of E=8 experts, H=128 → 2I=256 (gate_up layout).
  const [T, topK, E, H, I2] = [512, 2, 8, 128, 256];
  const logits = randomTensor(dev, [T, E], 'fp32', stream, 7);
  const routed = K.routerTopK(logits, topK, true, { stream });
  const d = K.moeDispatch(routed.indices, E, { stream });
  const x = randomTensor(dev, [T, H], 'fp32', stream, 8);
  const xs = K.moeGather(x, d.order, topK, { stream });
  const w = randomTensor(dev, [E, I2, H], 'fp32', stream, 9);
  const wDense = randomTensor(dev, [I2, H], 'fp32', stream, 10);
  const gmFlops = 2 * T * topK * H * I2;
  const moeRows: Array<Record<string, unknown>> = [];
  for (const impl of ['fast', 'reference'] as const) {
    const t = await timeOps(stream, impl === 'fast' ? 20 : 2, 3, () => [K.groupedMatmul(xs, w, d.offsets, { transB: true, stream, impl })]);
    moeRows.push({
      kernel: 'moe.groupedMatmul',
      impl,
      shape: `T${T} top${topK} E${E} ${H}->${I2}`,
      ms: round(t * 1e3, 3),
      gflops: round(gmFlops / t / 1e9, 2),
    });
  }
  const dense = await timeOps(stream, 20, 3, () => [matmul(xs, wDense, { transB: true, stream })]);
  moeRows.push({
    kernel: 'dense matmul, same FLOPs',
    impl: 'fast',
    shape: `${T * topK}x${H} · ${H}x${I2}`,
    ms: round(dense * 1e3, 3),
    gflops: round(gmFlops / dense / 1e9, 2),
  });
  stream.destroy();
  return {
    suite: 'kernels',
    date: new Date().toISOString(),
    baselines: { openblas: blas.available ? { library: blas.library, config: blas.config, threads: 1 } : null },
    repeats,
    loadAverage: os.loadavg().map((x) => round(x, 2)),
    matmulKernels,
    rows: [...withMatmulTargets(matmulRows, matmulKernels.bf16), ...shapeRows, ...attentionRows, ...moeRows],
  };
}

export async function main(argv: string[]): Promise<void> {
  const flags = checkFlags('kernels', argv, { valued: ['--repeats'] });
  const v = flags.get('--repeats') ?? '3';
  if (!/^\d+$/.test(v) || Number(v) < 1 || Number(v) > 100)
    throw new BenchUsageError(`Expected an integer in 1..100 for --repeats but received ${JSON.stringify(v)}`);
  const repeats = Number(v);
  const load0 = os.loadavg()[0]!;
  const r = await runKernelsBench(repeats);
  if (!r.baselines.openblas) console.log('OpenBLAS not found: the OpenBLAS column is empty (apt-get install libopenblas0-serial to compare).');
  else console.log(`OpenBLAS baseline: ${r.baselines.openblas.library} (${r.baselines.openblas.config}), 1 thread`);
  console.log(`matmul kernels: fp32 ${r.matmulKernels.fp32}, bf16 ${r.matmulKernels.bf16}`);
  console.log(`load average ${round(load0, 2)} before, ${r.loadAverage.join(' ')} after (2-core machines are often shared); medians of ${repeats}`);
  printTable(r.rows.filter((x) => x.kernel === 'matmul'));
  printTable(r.rows.filter((x) => x.kernel === 'matmul.shape'));
  printTable(r.rows.filter((x) => x.kernel === 'attention'));
  printTable(r.rows.filter((x) => !['matmul', 'matmul.shape', 'attention'].includes(String(x.kernel))));
  console.log(`wrote ${writeResults('kernels', r)}`);
}
