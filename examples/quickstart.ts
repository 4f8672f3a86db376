/**
 * Ascent quickstart: data-parallel training of a tiny Qwen3-style model on the
 * shipped synthetic task (reverse a string of digits), one rank per device.
 *
 *   npm run quickstart -- [--steps 100] [--model dense|moe]     (node bin/launch.mjs --nproc 16 examples/quickstart.ts)
 *
 * Every rank starts from the same seeded parameters, computes gradients on its own
 * batch, averages them with an allReduce over the world communicator (ctx.comm),
 * and takes the same AdamW step, so all replicas stay identical (checked at the
 * end). Rank 0 prints the loss averaged over ranks.
 */
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { cosineLr, loadModelConfig, SupervisedTrainer, syntheticTask, Tensor, type RankContext } from 'ascent';

export async function main(ctx: RankContext): Promise<void> {
  const { values } = parseArgs({ args: [...ctx.args], options: { steps: { type: 'string', default: '100' }, model: { type: 'string', default: 'dense' }, batch: { type: 'string', default: '8' } } });
  const steps = Number(values.steps);
  const perRank = Number(values.batch);
  if (!Number.isInteger(steps) || steps < 1) throw new Error(`--steps must be a positive integer, got ${values.steps}`);
  if (values.model !== 'dense' && values.model !== 'moe') throw new Error(`--model must be dense or moe, got ${values.model}`);
  const cfg = loadModelConfig(fileURLToPath(new URL(`./models/tiny-${values.model}/config.json`, import.meta.url)));
  const peak = 5e-3;
  const trainer = SupervisedTrainer.create(cfg, ctx.device, /* same seed on every rank */ 1, { lr: peak, weightDecay: 0 });
  const { stream } = trainer;
  const params = [...trainer.params.vars.values()];
  const lossBuf = Tensor.zeros(ctx.device, [1], 'fp32', { stream });
  const t0 = Date.now();
  let first = 0;
  let last = 0;
  for (let step = 0; step < steps; step++) {
    // Each rank draws a different batch: the global batch is worldSize x perRank.
    const data = syntheticTask.makeBatch(1_000 + step * ctx.worldSize + ctx.rank, perRank, 20);
    trainer.params.zeroGrad(stream);
    const { loss } = await trainer.forwardBackward(data.inputIds, data.targets, perRank, 20, true);
    // Average gradients (in place) and the loss across data-parallel ranks.
    for (const p of params) await ctx.comm.allReduce(p.grad!, p.grad!, 'avg', stream);
    const local = Tensor.fromArray(ctx.device, new Float32Array([loss!]), [1], { stream });
    await ctx.comm.allReduce(local, lossBuf, 'avg', stream);
    local.release();
    trainer.params.adamw({ lr: cosineLr(step, steps, peak, 10), weightDecay: 0 }, stream);
    const mean = (await lossBuf.toArray({ stream }))[0] as number;
    if (step === 0) first = mean;
    last = mean;
    if (step % 10 === 0 || step === steps - 1) {
      ctx.log.leader(`step ${String(step).padStart(3)}  loss ${mean.toFixed(4)}  (${ctx.worldSize} ranks x ${perRank} sequences, ${((Date.now() - t0) / (step + 1)).toFixed(0)} ms/step)`);
    }
  }
  // Replicas must be identical: compare a parameter checksum across ranks with max and min.
  let sum = 0;
  for (const v of (await trainer.params.toHost(stream)).values()) for (let i = 0; i < v.length; i += 97) sum += v[i]!;
  const mine = Tensor.fromArray(ctx.device, new Float32Array([sum]), [1], { stream });
  const hi = Tensor.zeros(ctx.device, [1], 'fp32', { stream });
  const lo = Tensor.zeros(ctx.device, [1], 'fp32', { stream });
  await ctx.comm.allReduce(mine, hi, 'max', stream);
  await ctx.comm.allReduce(mine, lo, 'min', stream);
  const [h, l] = [(await hi.toArray({ stream }))[0], (await lo.toArray({ stream }))[0]];
  if (h !== l) throw new Error(`replicas diverged: parameter checksums range from ${l} to ${h}`);
  ctx.log.leader(`done: loss ${first.toFixed(3)} -> ${last.toFixed(3)} (${(100 * (1 - last / first)).toFixed(0)}% lower) in ${((Date.now() - t0) / 1000).toFixed(1)} s; all ${ctx.worldSize} replicas identical (checksum ${h})`);
  trainer.params.release();
}
