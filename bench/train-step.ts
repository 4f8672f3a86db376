/**
 * `npm run bench -- train-step`: one training step (forward, backward, AdamW) of the
 * fixed tiny models on one device: hidden 128, 2 layers, 4 heads (2 KV heads, head
 * dim 32), vocab 64, sequence 32, batch 64; dense intermediate 384; MoE 8 experts,
 * top-2, expert intermediate 128 (examples/models/tiny-{dense,moe}). Host syncs per
 * step are counted with the device's counter while the loss is not read.
 */
import { fileURLToPath } from 'node:url';
import { Device, loadModelConfig, SupervisedTrainer } from '../src/internal.js';
import { checkFlags } from './args.js';
import { round, writeResults } from './stats.js';
import { printTable } from './table.js';

export const USAGE = `Usage: npm run bench -- train-step

One forward+backward+AdamW step of the tiny dense and MoE models on one device: ms/step,
tokens/s, host syncs per step. No flags (-h, --help: this help).
Results: bench/results/train-step-<date>.json (and train-step-latest.json).
`;

const BATCH = 64;
const SEQ = 32;

export async function runTrainStepBench(steps = 20) {
  const rows = [];
  for (const model of ['dense', 'moe'] as const) {
    const cfg = loadModelConfig(fileURLToPath(new URL(`../../examples/models/tiny-${model}/config.json`, import.meta.url)));
    const dev = Device.get(model === 'dense' ? 0 : 1);
    const tr = SupervisedTrainer.create(cfg, dev, 1, { lr: 1e-3 });
    for (let s = 0; s < 3; s++) await tr.step(1, s, BATCH, SEQ, false); // warm-up
    await tr.stream.synchronize();
    const syncs0 = dev.stats().hostSyncs;
    const t0 = process.hrtime.bigint();
    for (let s = 0; s < steps; s++) await tr.step(1, 3 + s, BATCH, SEQ, false);
    await tr.stream.synchronize();
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    const hostSyncsPerStep = (dev.stats().hostSyncs - syncs0) / steps;
    const last = await tr.step(1, 3 + steps, BATCH, SEQ, true);
    rows.push({ model, msPerStep: round((seconds / steps) * 1e3, 2), tokensPerSec: Math.round((BATCH * SEQ * steps) / seconds), hostSyncsPerStep, lossAfter: round(last.loss!, 4) });
    tr.params.release();
  }
  return { suite: 'train-step', date: new Date().toISOString(), config: { hidden: 128, layers: 2, heads: 4, kvHeads: 2, vocab: 64, seq: SEQ, batch: BATCH }, rows };
}

export async function main(argv: string[]): Promise<void> {
  checkFlags('train-step', argv);
  const r = await runTrainStepBench();
  printTable(r.rows);
  console.log(`wrote ${writeResults('train-step', r)}`);
}
