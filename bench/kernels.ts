/**
 * `npm run bench -- kernels`: kernel throughput beside baselines measured in the
 * same run:
 *  - matmul GFLOP/s for n = 64 … 1024 (square, fp32 and bf16 with fp32 accumulation):
 *    the fast kernel, the reference kernel, and a single-threaded OpenBLAS sgemm when
 *    libopenblas is installed (found with dlopen; `apt-get install libopenblas0-serial`);
 *  - causal GQA attention forward and backward, fast vs reference;
 *  - the MoE grouped matmul (tokens routed to experts by device-side offsets) vs the
 *    dense matmul of the same FLOPs, and vs its reference.
 * Ascent kernels are timed on one stream (one native thread) as the best of a few
 * rounds of back-to-back ops; OpenBLAS runs on one thread too.
 */
import { Device, loadNative, matmul, Tensor, type DType, type Stream, kernels as K } from '../src/internal.js';
import { checkFlags } from './args.js';
import { round, writeResults } from './stats.js';
import { printTable } from './table.js';

export const USAGE = `Usage: npm run bench -- kernels

Matmul GFLOP/s (fast, reference, single-thread OpenBLAS when libopenblas is installed) for
n = 64..1024 in fp32 and bf16, causal GQA attention and the MoE grouped matmul. No flags
(-h, --help: this help). Results: bench/results/kernels-<date>.json (and kernels-latest.json).
`;

type Impl = 'fast' | 'reference';

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

export async function runKernelsBench() {
  const dev = Device.get(0);
  const stream = dev.newStream();
  const native = loadNative();
  const blas = native.blasInfo();
  const matmulRows: Array<Record<string, unknown>> = [];
  for (const dtype of ['fp32', 'bf16'] as const) {
    for (const n of [64, 128, 256, 512, 1024]) {
      const a = randomTensor(dev, [n, n], dtype, stream, 1);
      const b = randomTensor(dev, [n, n], dtype, stream, 2);
      const flops = 2 * n * n * n;
      const reps = Math.max(1, Math.round(2e8 / flops));
      const g = async (impl: Impl) =>
        flops /
        (await timeOps(stream, impl === 'reference' ? Math.max(1, reps >> 3) : reps, impl === 'reference' && n >= 512 ? 1 : 3, () => [
          matmul(a, b, { stream, impl }),
        ])) /
        1e9;
      const fast = await g('fast');
      const reference = await g('reference');
      const openblas = dtype === 'fp32' && blas.available ? flops / native.blasSgemmSeconds(n, n, n, Math.max(3, reps)) / 1e9 : null;
      matmulRows.push({
        kernel: 'matmul',
        dtype,
        n,
        fastGflops: round(fast, 2),
        referenceGflops: round(reference, 2),
        openblasGflops: openblas === null ? null : round(openblas, 2),
        fastVsReference: round(fast / reference, 2),
        fastVsOpenblas: openblas === null ? null : round(fast / openblas, 3),
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
    rows: [...matmulRows, ...attentionRows, ...moeRows],
  };
}

export async function main(argv: string[]): Promise<void> {
  checkFlags('kernels', argv);
  const r = await runKernelsBench();
  if (!r.baselines.openblas) console.log('OpenBLAS not found: the OpenBLAS column is empty (apt-get install libopenblas0-serial to compare).');
  else console.log(`OpenBLAS baseline: ${r.baselines.openblas.library} (${r.baselines.openblas.config}), 1 thread`);
  printTable(r.rows.filter((x) => x.kernel === 'matmul'));
  printTable(r.rows.filter((x) => x.kernel === 'attention'));
  printTable(r.rows.filter((x) => x.kernel !== 'matmul' && x.kernel !== 'attention'));
  console.log(`wrote ${writeResults('kernels', r)}`);
}
