/**
 * `npm run bench -- train-step`: one training step (forward, backward, AdamW) of the
 * fixed tiny models on one device: hidden 128, 2 layers, 4 heads (2 KV heads, head
 * dim 32), vocab 64, sequence 32, batch 64; dense intermediate 384; MoE 8 experts,
 * top-2, expert intermediate 128 (examples/models/tiny-{dense,moe}). Host syncs per
 * step are counted with the device's counter while the loss is not read. Rows for tiny
 * Qwen3.5 / Qwen3.5-MoE of the same scale (bench/tiny-qwen35.ts) follow, with their PyTorch
 * peer (bench/torch_qwen35.py: a plain recurrent Gated DeltaNet) and ratio too.
 */
import { fileURLToPath } from 'node:url';
import {
  Device,
  fill,
  initialParams,
  loadModelConfig,
  parseModelConfig,
  SingleDeviceStrategy,
  SupervisedTrainer,
  syntheticTask,
  Tensor,
} from '../src/internal.js';
import { TINY_QWEN35 } from './tiny-qwen35.js';
import { runTorchScript, torchPython } from './torch-peer.js';
import { checkFlags } from './args.js';
import { round, writeResults } from './stats.js';
import { printTable } from './table.js';

export const USAGE = `Usage: npm run bench -- train-step

One forward+backward+AdamW step of the tiny dense and MoE models on one device: ms/step,
tokens/s, host syncs per step; beside it the same step in PyTorch eager on one thread
(bench/torch_train_step.py, when an interpreter with torch is installed: Debian's
python3-torch) and the ratio Ascent / PyTorch; and the per-op dispatch overhead of both
(Ascent: a 1-element fill enqueued back to back, enqueue to completion, with the share of
them that ran inline on the idle stream; PyTorch: a 1-element add). Each Qwen3 row also gives
its ops per step and how many of them ran inline. Then the same step of tiny Qwen3.5 and Qwen3.5-MoE (bench/tiny-qwen35.ts) on
the single-device strategy, the path they train on, which reads the loss every step, beside
the same step in PyTorch (bench/torch_qwen35.py: the Gated DeltaNet in its plain
token-by-token recurrent form) and the ratio.
No flags (-h, --help: this help).
Results: bench/results/train-step-<date>.json (and train-step-latest.json).
`;

const BATCH = 64;
const SEQ = 32;

/**
 * µs per op of 1-element fills enqueued back to back and run to completion, and of one enqueue +
 * synchronize round trip; and the share of those ops that ran inline (the stream was idle).
 */
async function opOverhead(dev: Device): Promise<{ throughputUs: number; roundTripUs: number; inlinedShare: number }> {
  const stream = dev.newStream();
  const t = Tensor.empty(dev, [1], 'fp32');
  try {
    const n = 20_000;
    for (let i = 0; i < 1000; i++) fill(t, 1, { stream });
    await stream.synchronize();
    const before = stream.native.stats();
    let t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) fill(t, i, { stream });
    await stream.synchronize();
    const throughputUs = Number(process.hrtime.bigint() - t0) / 1e3 / n;
    const m = 2000;
    t0 = process.hrtime.bigint();
    for (let i = 0; i < m; i++) {
      fill(t, i, { stream });
      await stream.synchronize();
    }
    const after = stream.native.stats();
    return {
      throughputUs: round(throughputUs, 2),
      roundTripUs: round(Number(process.hrtime.bigint() - t0) / 1e3 / m, 2),
      inlinedShare: round((after.inlined - before.inlined) / (after.enqueued - before.enqueued), 3),
    };
  } finally {
    t.release();
    stream.destroy();
  }
}

/**
 * One step of a tiny Qwen3.5 model on SingleDeviceStrategy (SupervisedTrainer runs the Qwen3
 * decoder only). The strategy reads the loss each step, so one host sync per step is part of
 * the timing, unlike the Qwen3 rows.
 */
async function qwen35Row(model: keyof typeof TINY_QWEN35, steps: number, torchMs: number | null) {
  const cfg = parseModelConfig(TINY_QWEN35[model]);
  const dev = Device.get(0);
  const s = SingleDeviceStrategy.create(cfg, dev, initialParams(cfg, 1));
  const hp = { lr: 1e-3 };
  const step = async (i: number) => {
    s.zeroGrad();
    const r = await s.forwardBackward(syntheticTask.makeBatch(100_003 + i, BATCH, SEQ));
    s.optimizerStep(hp);
    return r.loss;
  };
  try {
    for (let i = 0; i < 3; i++) await step(i); // warm-up
    await dev.defaultStream.synchronize();
    const syncs0 = dev.stats().hostSyncs;
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < steps; i++) await step(3 + i);
    await dev.defaultStream.synchronize();
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    const hostSyncsPerStep = (dev.stats().hostSyncs - syncs0) / steps;
    const loss = await step(3 + steps);
    const msPerStep = (seconds / steps) * 1e3;
    return {
      model,
      msPerStep: round(msPerStep, 2),
      tokensPerSec: Math.round((BATCH * SEQ * steps) / seconds),
      hostSyncsPerStep,
      lossAfter: round(loss, 4),
      torchMsPerStep: torchMs === null ? null : round(torchMs, 2),
      vsTorch: torchMs === null ? null : round(msPerStep / torchMs, 3),
      note: 'single strategy, loss read every step; PyTorch peer: recurrent Gated DeltaNet (bench/torch_qwen35.py)',
    };
  } finally {
    s.release();
  }
}

export async function runTrainStepBench(steps = 20) {
  const rows = [];
  const { peer: torch, reason: torchReason } = torchPython();
  // Config file paths for Qwen3, the configs themselves for Qwen3.5.
  const models: Record<string, string | object> = { ...TINY_QWEN35 };
  for (const m of ['dense', 'moe'] as const) models[m] = fileURLToPath(new URL(`../../examples/models/tiny-${m}/config.json`, import.meta.url));
  const peer = torch
    ? runTorchScript<{ torch: string; threads: number; rows: Array<{ model: string; msPerStep: number }>; opOverheadUs: number }>(
        torch.python,
        'torch_train_step.py',
        { models, batch: BATCH, seq: SEQ, steps },
      )
    : null;
  for (const model of ['dense', 'moe'] as const) {
    const cfg = loadModelConfig(fileURLToPath(new URL(`../../examples/models/tiny-${model}/config.json`, import.meta.url)));
    const dev = Device.get(model === 'dense' ? 0 : 1);
    const tr = SupervisedTrainer.create(cfg, dev, 1, { lr: 1e-3 });
    for (let s = 0; s < 3; s++) await tr.step(1, s, BATCH, SEQ, false); // warm-up
    await tr.stream.synchronize();
    const syncs0 = dev.stats().hostSyncs;
    const ops0 = tr.stream.native.stats();
    const t0 = process.hrtime.bigint();
    for (let s = 0; s < steps; s++) await tr.step(1, 3 + s, BATCH, SEQ, false);
    await tr.stream.synchronize();
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    const hostSyncsPerStep = (dev.stats().hostSyncs - syncs0) / steps;
    const ops1 = tr.stream.native.stats();
    const last = await tr.step(1, 3 + steps, BATCH, SEQ, true);
    const msPerStep = (seconds / steps) * 1e3;
    const torchMs = peer?.rows.find((r) => r.model === model)?.msPerStep ?? null;
    rows.push({
      model,
      msPerStep: round(msPerStep, 2),
      tokensPerSec: Math.round((BATCH * SEQ * steps) / seconds),
      hostSyncsPerStep,
      // Ops per step, and how many ran inline: the step keeps its stream busy, so few do.
      opsPerStep: round((ops1.enqueued - ops0.enqueued) / steps, 1),
      inlinedPerStep: round((ops1.inlined - ops0.inlined) / steps, 1),
      lossAfter: round(last.loss!, 4),
      torchMsPerStep: torchMs === null ? null : round(torchMs, 2),
      // The target: Ascent's step takes at most 0.6x PyTorch's.
      vsTorch: torchMs === null ? null : round(msPerStep / torchMs, 3),
    });
    tr.params.release();
  }
  for (const model of ['qwen3.5', 'qwen3.5-moe'] as const)
    rows.push(await qwen35Row(model, steps, peer?.rows.find((r) => r.model === model)?.msPerStep ?? null));
  const overhead = await opOverhead(Device.get(0));
  return {
    suite: 'train-step',
    date: new Date().toISOString(),
    config: { hidden: 128, layers: 2, heads: 4, kvHeads: 2, vocab: 64, seq: SEQ, batch: BATCH },
    rows,
    opOverhead: {
      ascentThroughputUs: overhead.throughputUs,
      ascentRoundTripUs: overhead.roundTripUs,
      ascentInlinedShare: overhead.inlinedShare,
      torchUs: peer ? round(peer.opOverheadUs, 2) : null,
    },
    baselines: {
      torch: peer ? { version: peer.torch, threads: peer.threads, python: torch!.python, blas: torch!.blas, blasLibraries: torch!.blasLibraries } : null,
      torchMissing: torchReason || null,
    },
  };
}

export async function main(argv: string[]): Promise<void> {
  checkFlags('train-step', argv);
  const r = await runTrainStepBench();
  printTable(r.rows);
  printTable([r.opOverhead], 'per-op dispatch overhead (µs)');
  if (!r.baselines.torch) console.log(r.baselines.torchMissing);
  else
    console.log(
      `PyTorch baseline: torch ${r.baselines.torch.version} (${r.baselines.torch.python}, ${r.baselines.torch.blas} BLAS), ${r.baselines.torch.threads} thread; vsTorch = Ascent ms / PyTorch ms (target <= 0.6)`,
    );
  console.log(`wrote ${writeResults('train-step', r)}`);
}
