/**
 * The kernels bench's n = 64 fp32 row in a fresh process, round by round: what a row measures
 * (wall time per op from JS, 381 ops held per round, 3 rounds a repeat, profiling on) beside
 * OpenBLAS, after an optional warm-up of the JS path. Cold, a process's first ~1500 calls run
 * unoptimised while V8's optimising compiler takes the other core; this shows how many rounds
 * that costs and what the op settles at.
 *
 *   npm run build && node dist/bench/dev/matmul-row.js [warmUpOps=0] [repeats=5]
 */
import { Device, loadNative, matmul, Tensor } from '../../src/internal.js';

const [warmUp = 0, repeats = 5] = process.argv.slice(2).map(Number);
const n = 64;
const reps = Math.round(2e8 / (2 * n * n * n));
const dev = Device.get(0);
const stream = dev.newStream();
const host = () => Float32Array.from({ length: n * n }, () => Math.random() - 0.5);
const a = Tensor.fromArray(dev, host(), [n, n], { stream });
const b = Tensor.fromArray(dev, host(), [n, n], { stream });
const run = () => matmul(a, b, { stream, transA: false, transB: false });
for (let i = 0; i < warmUp; i++) run().release();
await stream.synchronize({ timeoutMs: 60_000 });
stream.native.profile(true);
for (let r = 0; r < repeats; r++) {
  const rounds: number[] = [];
  for (let k = 0; k < 3; k++) {
    const made: Tensor[] = [];
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < reps; i++) made.push(run());
    await stream.synchronize({ timeoutMs: 60_000 });
    rounds.push(Number(process.hrtime.bigint() - t0) / 1e3 / reps);
    stream.native.drainProfile();
    for (const t of made) t.release();
  }
  const blasUs = loadNative().blasSgemmSeconds(n, n, n, reps, false, false) * 1e6;
  const best = Math.min(...rounds);
  console.log(
    `repeat ${r}: rounds ${rounds.map((x) => x.toFixed(2)).join(' ')} us/op, best ${best.toFixed(2)}; OpenBLAS ${blasUs.toFixed(2)} us/op; ratio ${(blasUs / best).toFixed(3)}`,
  );
}
stream.native.profile(false);
stream.destroy();
