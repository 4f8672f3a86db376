/**
 * `npm run bench -- trainer [--steps N] [--models dense,moe] [--ranks 1,4,8,16]`: one
 * training step (zero grad, forward, backward, clip, AdamW) of the tiny models under
 * each strategy and layout on 1, 4, 8 and 16 ranks, through the trainer actor on real
 * worker ranks. Every row trains the same seed on the same global batch (64 x 32
 * tokens), so the step-1 loss of every row of a model must be the same number
 * (checked here within 1e-5 relative: a sharding bug shows up as a different loss).
 *
 * Columns: msPerStep (rank 0's wall time per step, median over the timed steps),
 * commShare (time rank 0 spent in collectives / step time, from the flight
 * recorders), lossStep1. Results: bench/results/trainer.json.
 */
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { World, syntheticTask, trainerActorSpec, type TrainerActor, type TrainerConfigInput } from '../src/internal.js';
import { BenchUsageError } from './args.js';
import { round, writeResults } from './stats.js';
import { printTable } from './table.js';

export const USAGE = `Usage: npm run bench -- trainer [flags]

One training step of the tiny models under every strategy and layout on 1, 4, 8 and 16
ranks: ms/step, comm share, step-1 loss (must agree across layouts; exit 1 if not).
Results: bench/results/trainer-<date>.json (and trainer-latest.json).

Flags:
  --steps <n>       timed steps per row (default 5)
  --models <list>   dense,moe (default both)
  --ranks <list>    rank counts out of 1,4,8,16 (default all)
  -h, --help        print this help and exit
`;

const BATCH = 64;
const SEQ = 32;

interface RowSpec {
  strategy: 'single' | 'fsdp2' | 'megatron';
  ranks: number;
  layout: string;
  parallel: Partial<Pick<TrainerConfigInput, 'tp' | 'dp' | 'ep'>>;
}

/** The rows for one model (MoE adds expert-parallel layouts). */
export function rowSpecs(model: 'dense' | 'moe', ranks: readonly number[]): RowSpec[] {
  const rows: RowSpec[] = [];
  for (const n of ranks) {
    if (n === 1) {
      rows.push({ strategy: 'single', ranks: 1, layout: 'single', parallel: {} });
      continue;
    }
    rows.push({ strategy: 'fsdp2', ranks: n, layout: `dp${n}`, parallel: { dp: n } });
    rows.push({ strategy: 'megatron', ranks: n, layout: `tp2dp${n / 2}`, parallel: { tp: 2, dp: n / 2 } });
    if (model === 'moe') rows.push({ strategy: 'megatron', ranks: n, layout: `dp${n}ep2`, parallel: { tp: 1, dp: n, ep: 2 } });
  }
  return rows;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function runRow(model: 'dense' | 'moe', spec: RowSpec, steps: number) {
  const modelDir = fileURLToPath(new URL(`../../examples/models/tiny-${model}`, import.meta.url));
  const world = await World.create({ size: spec.ranks, taskPool: false });
  try {
    const trainers = await world.spawn<TrainerActor>(
      trainerActorSpec({ strategy: spec.strategy, model: modelDir, init: { seed: 1 }, optimizer: { lr: 1e-3 }, clipGradNorm: 1.0, ...spec.parallel }),
    );
    const [info] = await trainers.call('setup');
    const batchOf = (i: number) => {
      const b = syntheticTask.makeBatch(1000 + i, BATCH, SEQ);
      return { inputIds: b.inputIds, targets: b.targets, batch: BATCH, seqLen: SEQ };
    };
    const first = await trainers.call('trainStep', batchOf(0));
    const lossStep1 = first[0]!.loss;
    await trainers.call('trainStep', batchOf(1)); // warm-up
    const ms: number[] = [];
    const comm: number[] = [];
    for (let i = 0; i < steps; i++) {
      const r = await trainers.call('trainStep', batchOf(2 + i), { measureComm: true });
      ms.push(r[0]!.ms.total);
      comm.push(r[0]!.ms.comm / r[0]!.ms.total);
    }
    return {
      strategy: spec.strategy,
      ranks: spec.ranks,
      layout: info!.layout,
      model,
      msPerStep: round(median(ms), 2),
      commShare: round(median(comm), 3),
      lossStep1,
    };
  } finally {
    await world.shutdown();
  }
}

export async function runTrainerBench(opts: { steps: number; models: Array<'dense' | 'moe'>; ranks: number[] }) {
  const rows = [];
  const mismatches: string[] = [];
  for (const model of opts.models) {
    let ref: number | null = null;
    for (const spec of rowSpecs(model, opts.ranks)) {
      const row = await runRow(model, spec, opts.steps);
      process.stderr.write(`${model} ${spec.strategy} ${row.layout}: ${row.msPerStep} ms/step, comm ${row.commShare}, loss ${row.lossStep1}\n`);
      ref ??= row.lossStep1;
      const rel = Math.abs(row.lossStep1 - ref) / Math.abs(ref);
      if (rel > 1e-5) mismatches.push(`${model} ${row.layout}: step-1 loss ${row.lossStep1} vs ${ref} (rel ${rel.toExponential(2)})`);
      rows.push(row);
    }
  }
  return { suite: 'trainer', date: new Date().toISOString(), config: { batch: BATCH, seq: SEQ, steps: opts.steps }, rows, lossMismatches: mismatches };
}

export async function main(argv: string[]): Promise<void> {
  const cmd = new Command('bench trainer')
    .option('--steps <n>', 'timed steps per row', (v) => Number(v), 5)
    .option('--models <list>', 'dense,moe', 'dense,moe')
    .option('--ranks <list>', 'rank counts', '1,4,8,16')
    .exitOverride()
    .configureOutput({ writeErr: () => undefined, writeOut: () => undefined });
  cmd.parse(argv, { from: 'user' });
  const o = cmd.opts<{ steps: number; models: string; ranks: string }>();
  const models = o.models.split(',') as Array<'dense' | 'moe'>;
  for (const m of models)
    if (m !== 'dense' && m !== 'moe') throw new BenchUsageError(`bench trainer: unknown model ${JSON.stringify(m)}; expected dense and/or moe.`);
  const ranks = o.ranks.split(',').map(Number);
  for (const n of ranks) if (![1, 4, 8, 16].includes(n)) throw new BenchUsageError(`bench trainer: --ranks takes 1, 4, 8 and 16 (got ${n}).`);
  const r = await runTrainerBench({ steps: o.steps, models, ranks });
  printTable(r.rows);
  console.log(`wrote ${writeResults('trainer', r)}`);
  if (r.lossMismatches.length) {
    console.error(`step-1 losses differ across layouts:\n  ${r.lossMismatches.join('\n  ')}`);
    process.exitCode = 1;
  }
}
