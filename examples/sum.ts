// examples/sum.ts — every rank contributes rank + 1; an all-reduce sums them on the device.
// Run: npm run launch -- --nproc 4 examples/sum.ts
import { Tensor, type RankContext } from 'ascent';

export async function main(ctx: RankContext): Promise<void> {
  const x = Tensor.fromArray(ctx.device, new Float32Array([ctx.rank + 1]), [1]);
  const y = Tensor.zeros(ctx.device, [1]);
  await ctx.comm.allReduce(x, y, 'sum'); // enqueued on the device's stream
  ctx.log.info(`sum over ${ctx.worldSize} ranks = ${(await y.toArray())[0]}`);
}
