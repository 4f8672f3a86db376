/**
 * One of the kernels bench's square fp32 rows (n = 64 by default) in a fresh process, round by
 * round: what a row measures (wall time per op from JS, the row's ops held per round, 3 rounds a
 * repeat, profiling on) beside OpenBLAS, after an optional warm-up of the JS path. Cold, a
 * process's first ~1500 calls run unoptimised while V8's optimising compiler takes the other core;
 * this shows how many rounds that costs and what the op settles at. It also prints the time the
 * ops held the stream's thread (onStream: the kernel, C's first touch included). Wall minus
 * onStream is dispatch, which no kernel change moves: the JS wrapper and the native entry, and,
 * once the operands pass 1 MiB (n = 512 here) and the op no longer runs inline, the stream
 * thread's wake-up. With `release` each output is released as soon as it is made (as a
 * `c = a @ b` loop in PyTorch frees it), so every op writes the same warm block: what holding the
 * round's outputs (the bench's method, `hold`) costs shows as the difference.
 *
 *   npm run build && node dist/bench/dev/matmul-row.js [warmUpOps=0] [repeats=5] [n=64] [hold|release]
 */
import { Device, loadNative, matmul, Tensor } from '../../src/internal.js';

const [warmUp = 0, repeats = 5, n = 64] = process.argv.slice(2, 5).map(Number);
const outputs = process.argv[5] ?? 'hold';
if (!Number.isInteger(n) || n < 1 || n > 4096) throw new Error(`matmul-row: n must be an integer in 1..4096, got ${process.argv[4]}`);
if (outputs !== 'hold' && outputs !== 'release') throw new Error(`matmul-row: the 4th argument must be 'hold' or 'release', got '${outputs}'`);
// As bench/kernels.ts sizes a row.
const reps = Math.max(1, Math.round(2e8 / (2 * n * n * n)));
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
  const held: number[] = [];
  for (let k = 0; k < 3; k++) {
    const made: Tensor[] = [];
    const t0 = process.hrtime.bigint();
    if (outputs === 'hold') for (let i = 0; i < reps; i++) made.push(run());
    else for (let i = 0; i < reps; i++) run().release();
    await stream.synchronize({ timeoutMs: 60_000 });
    rounds.push(Number(process.hrtime.bigint() - t0) / 1e3 / reps);
    const p = stream.native.drainProfile();
    let us = 0;
    for (let i = 0; i < p.names.length; i++) if (p.names[i] === 'matmul') us += p.end[i]! - p.start[i]!;
    held.push(us / reps);
    for (const t of made) t.release();
  }
  const blasUs = loadNative().blasSgemmSeconds(n, n, n, reps, false, false) * 1e6;
  const best = Math.min(...rounds);
  console.log(
    `repeat ${r}: rounds ${rounds.map((x) => x.toFixed(2)).join(' ')} us/op, best ${best.toFixed(2)}, onStream best ${Math.min(...held).toFixed(2)}; OpenBLAS ${blasUs.toFixed(2)} us/op; ratio ${(blasUs / best).toFixed(3)}`,
  );
}
stream.native.profile(false);
stream.destroy();
