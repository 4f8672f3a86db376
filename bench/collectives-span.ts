/**
 * Entry of the 2-process rows of `bench collectives` (bench/collectives-mpi.ts runs it as
 * `mpirun -np P ascent launch --nproc-per-node N`): fp32 sum allReduce over every rank of
 * every process, per size in the arguments. Collectives that span processes must be
 * awaited one by one (spanning-comm.ts), so time = the slowest rank's mean per awaited op.
 *
 *   args: <iters> <bytes>...    prints on rank 0: SPAN [{ bytes, timeUs, wrong }, ...]
 */
import { fill, Tensor, type RankContext } from '../src/internal.js';

export async function main(ctx: RankContext): Promise<void> {
  const [itersArg, ...sizes] = ctx.args;
  const iters = Number(itersArg);
  const { comm, device } = ctx;
  const rows: Array<{ bytes: number; timeUs: number; wrong: number }> = [];
  const want = (comm.size * (comm.size + 1)) / 2;
  for (const arg of sizes) {
    const n = Math.floor(Number(arg) / 4);
    const send = Tensor.empty(device, [n]);
    const recv = Tensor.empty(device, [n]);
    const stat = Tensor.empty(device, [2]);
    const statOut = Tensor.empty(device, [2]);
    try {
      fill(send, ctx.rank + 1);
      for (let w = 0; w < 3; w++) await comm.allReduce(send, recv);
      await comm.barrier();
      const t0 = performance.now();
      for (let i = 0; i < iters; i++) await comm.allReduce(send, recv);
      const perOpUs = ((performance.now() - t0) * 1000) / iters;
      const got = await recv.toArray();
      let wrong = 0;
      for (let i = 0; i < got.length; i++) if (Number(got[i]) !== want) wrong++;
      // The slowest rank's time (max) and the wrong elements of every rank (sum).
      const times = Tensor.fromArray(device, new Float32Array([perOpUs, 0]), [2]);
      await comm.allReduce(times, statOut, 'max');
      const wrongs = Tensor.fromArray(device, new Float32Array([0, wrong]), [2]);
      await comm.allReduce(wrongs, stat, 'sum');
      times.release();
      wrongs.release();
      const [slowest] = Array.from(await statOut.toArray(), Number);
      const [, wrongAll] = Array.from(await stat.toArray(), Number);
      rows.push({ bytes: n * 4, timeUs: slowest!, wrong: wrongAll! });
    } finally {
      send.release();
      recv.release();
      stat.release();
      statOut.release();
    }
  }
  if (ctx.rank === 0) console.log(`SPAN ${JSON.stringify(rows)}`);
}
