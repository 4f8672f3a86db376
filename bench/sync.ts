/**
 * Weight-sync benchmark: `npm run bench -- sync [--bucket-bytes N] [--repeat R]` writes
 * bench/results/sync.json with rows { mode, trainer, engineTp, model, paramBytes,
 * engineBytes, trafficBytes, seconds, GBs, efficiency, peakExtraBytes, ... } for the synthetic ~514 MB
 * dense model of bench/sync-rank.ts (fp32), in five setups run under `launch` on real
 * ranks: colocate fsdp2 dp2 → engine tp 1 (so 2 engine replicas, one per rank), colocate
 * megatron tp2 → engine tp 2 (1 replica), server megatron tp2 → 2 engine ranks (tp 2, 1
 * replica), and the first and last again with bf16 engines (engine dtype bfloat16: the sync
 * casts and moves half the bytes; their engineBytes are the bf16 bytes the engines hold).
 * With --repeat R every setup runs R times (each a fresh launch); every run is a
 * row (with the 1-minute load average when it started) and a summary per setup gives the
 * min / median / max efficiency — the machine is shared, so one number is not enough.
 *
 * seconds: the slowest rank's best-of-3 sync time. GBs = paramBytes / seconds.
 *
 * efficiency = trafficBytes / seconds / streamCopyGBs, where streamCopyGBs is the
 * STREAM-like copy bandwidth measured in the same run (all ranks copying at once; the sum
 * of their read+write GB/s, capped by the slowest; each rank's best before or after the
 * syncs) and trafficBytes is one model for every row — the memory traffic a sync cannot
 * avoid:
 *   2 · engineBytes             every byte the engine ranks hold (their runtime
 *                               parameters, summed over engine ranks) written once into
 *                               the engine and read once from the trainer's memory. For
 *                               dp2 → tp1 that is two whole models (two engines); for a
 *                               tp2 engine it is the model once plus what the engine keeps
 *                               whole on every TP rank (embedding, lm_head, norms) — those
 *                               bytes must be written on each rank whatever the sync does;
 * + wireBytes · engineRanks     server only: the broadcast delivers every bucket to every
 *                               engine rank (the mode's protocol: buckets over a sync
 *                               communicator to a standalone server group); wireBytes is
 *                               paramBytes, half of it with bf16 engines.
 * Collective overheads, staging copies and discarded bytes (a TP shard broadcast to the
 * engine rank that does not keep it) are not counted: they are what an implementation
 * should avoid. Each row also reports efficiency2P, the same run under the earlier model
 * (2 · paramBytes for every row), which counts one model per row: it ignores the second
 * engine of dp2 → tp1, the engine's replicated tensors and the server's broadcast.
 *
 * peakExtraBytes: the largest over the ranks of device peak minus what was allocated when
 * the sync started.
 *
 * stepShareMax: an upper bound on the sync's share of a GRPO step of this model, sync / (sync +
 * update), where update is the trainers' time for one update of an eighth of the quickstart's
 * batch (16 rows of 24 tokens, clipping, AdamW; bench/sync-rank.ts UPDATE_SHAPE). A real step updates on the whole batch and also generates and computes
 * log-probs, so its share is lower. Target: <= 0.05.
 *
 * verifyRatio: the cost of verification (verify: true — exact fingerprints of every tensor
 * region on every engine rank, compared with the trainers') as a ratio to the sync time,
 * both from the same verified syncs (slowest rank of each; best of 3).
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { loadavg } from 'node:os';
import { paramBytes, parseModelConfig } from '../src/internal.js';
import { BENCH_CONFIG } from './sync-rank.js';
import { BenchUsageError, checkFlags } from './args.js';
import { round, writeResults } from './stats.js';
import { printTable } from './table.js';

export const USAGE = `Usage: npm run bench -- sync [flags]

Weight sync of a ~514 MB model, colocate and server, under launch on real ranks, beside a
STREAM-like copy measured in the same run.
Results: bench/results/sync-<date>.json (and sync-latest.json).

Flags:
  --bucket-bytes <n>   bucket size in bytes, a multiple of 64 (default 536870912)
  --repeat <r>         runs per setup, 1..20 (default 1)
  -h, --help           print this help and exit
`;

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the ranks' RESULT lines are plain JSON read field by field below
function launchRanks(nproc: number, args: string[]): Promise<Array<Record<string, any>>> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [join(ROOT, 'bin', 'launch.mjs'), '--nproc', String(nproc), '--no-prefix', join(ROOT, 'dist', 'bench', 'sync-rank.js'), ...args],
      { cwd: ROOT, env: { ...process.env, ASCENT_DEVICE_MEMORY: '6GiB' } },
    );
    let out = '',
      err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`bench sync: launch ${args.join(' ')} exited with ${code}:\n${err.slice(-4000)}`));
      resolve(
        out
          .split('\n')
          .filter((l) => l.startsWith('RESULT '))
          .map((l) => JSON.parse(l.slice(7))),
      );
    });
  });
}

export async function main(argv: string[]): Promise<void> {
  const flags = checkFlags('sync', argv, { valued: ['--bucket-bytes', '--repeat'] });
  const bucket = Number(flags.get('--bucket-bytes') ?? 512 * 1024 * 1024);
  if (!Number.isSafeInteger(bucket) || bucket < 64 || bucket % 64)
    throw new BenchUsageError(`Expected --bucket-bytes to be a multiple of 64 but received ${flags.get('--bucket-bytes')}`);
  const repeat = Number(flags.get('--repeat') ?? 1);
  if (!Number.isSafeInteger(repeat) || repeat < 1 || repeat > 20)
    throw new BenchUsageError(`Expected --repeat to be an integer in [1, 20] but received ${flags.get('--repeat')}`);
  const cfg = parseModelConfig(BENCH_CONFIG, 'bench');
  const bytes = paramBytes(cfg);
  const model = `dense h${cfg.hiddenSize} L${cfg.numLayers} V${cfg.vocabSize} fp32`;
  const rows = [];
  const summary = [];
  for (const [nproc, args] of [
    [2, ['colocate', 'fsdp2']],
    [2, ['colocate', 'megatron']],
    [4, ['server', 'megatron']],
    [2, ['colocate', 'fsdp2', 'bfloat16']],
    [4, ['server', 'megatron', 'bfloat16']],
  ] as const) {
    const effs: number[] = [],
      ratios: number[] = [];
    for (let rep = 0; rep < repeat; rep++) {
      const load1 = round(loadavg()[0]!, 2);
      const res = await launchRanks(nproc, [args[0], args[1], String(bucket), ...args.slice(2)]);
      const seconds = Math.max(...res.map((r) => r.seconds));
      const streamGBs = Math.min(...res.map((r) => r.streamGBs)) * res.length;
      const engineRanks = args[0] === 'server' ? nproc / 2 : nproc;
      const replicas = engineRanks / res[0]!.engineTp;
      const engineBytes = res.reduce((a, r) => a + r.engineBytes, 0);
      // A bf16 engine's sync moves its matmul weights in bf16: half the bytes (the fp32 norms are < 0.01% of them).
      const wireBytes = res[0]!.dtype === 'bfloat16' ? bytes / 2 : bytes;
      const broadcastBytes = args[0] === 'server' ? wireBytes * engineRanks : 0;
      const trafficBytes = 2 * engineBytes + broadcastBytes;
      const GBs = bytes / seconds / 1e9;
      const efficiency = round(trafficBytes / seconds / 1e9 / streamGBs, 3);
      // The same run under the older, smaller model (2 · paramBytes for every row), for comparison.
      const efficiency2P = round((2 * bytes) / seconds / 1e9 / streamGBs, 3);
      effs.push(efficiency);
      const verifySeconds = Math.max(...res.map((r) => r.verify.verifySeconds));
      const verifiedSyncSeconds = Math.max(...res.map((r) => r.verify.syncSeconds));
      const verify = {
        verifySeconds: round(verifySeconds, 4),
        verifiedSyncSeconds: round(verifiedSyncSeconds, 4),
        verifyRatio: round(verifySeconds / verifiedSyncSeconds, 3),
        fingerprints: res[0]!.verify.fingerprints,
      };
      ratios.push(verify.verifyRatio);
      // Upper bound on the sync's share of a GRPO step of this model: the update alone stands for the step.
      const updateSeconds = Math.max(...res.map((r) => r.updateSeconds));
      const stepShareMax = round(seconds / (seconds + updateSeconds), 4);
      const row = {
        mode: res[0]!.mode,
        engineDtype: res[0]!.dtype,
        trainer: res[0]!.trainer,
        engineTp: res[0]!.engineTp,
        engineRanks,
        replicas,
        model,
        paramBytes: bytes,
        engineBytes,
        trafficBytes,
        seconds: round(seconds, 4),
        GBs: round(GBs, 3),
        efficiency,
        efficiency2P,
        peakExtraBytes: Math.max(...res.map((r) => r.peakExtraBytes)),
        bucketBytes: bucket,
        streamCopyGBs: round(streamGBs, 2),
        loadAvg1: load1,
        ...verify,
        updateSeconds: round(updateSeconds, 3),
        stepShareMax,
        target: `stepShareMax <= 0.05: ${round(0.05 / stepShareMax, 3)} ${stepShareMax <= 0.05 ? 'holds' : 'fails'}`,
      };
      process.stderr.write(
        `${row.mode} ${row.trainer} -> ${row.engineDtype} engine tp${row.engineTp}: ${row.seconds} s, efficiency ${row.efficiency}, verify ratio ${row.verifyRatio}, update ${row.updateSeconds} s, step share <= ${row.stepShareMax}\n`,
      );
      rows.push(row);
    }
    const sorted = [...effs].sort((x, y) => x - y);
    const sum = {
      mode: args[0],
      engine: rows[rows.length - 1]!.engineDtype,
      trainer: rows[rows.length - 1]!.trainer,
      runs: repeat,
      efficiencyMin: sorted[0],
      efficiencyMedian: sorted[Math.floor((sorted.length - 1) / 2)],
      efficiencyMax: sorted[sorted.length - 1],
      verifyRatioMin: Math.min(...ratios),
      verifyRatioMax: Math.max(...ratios),
    };
    summary.push(sum);
  }
  printTable(
    rows.map((r) => ({
      mode: r.mode,
      engine: r.engineDtype,
      trainer: r.trainer,
      engineTp: r.engineTp,
      replicas: r.replicas,
      seconds: r.seconds,
      GBs: r.GBs,
      efficiency: r.efficiency,
      efficiency2P: r.efficiency2P,
      peakExtraBytes: r.peakExtraBytes,
      verifyRatio: r.verifyRatio,
      updateSeconds: r.updateSeconds,
      stepShareMax: r.stepShareMax,
      target: r.target,
      streamCopyGBs: r.streamCopyGBs,
      loadAvg1: r.loadAvg1,
    })),
  );
  printTable(summary);
  console.log(
    `wrote ${writeResults('sync', { trafficModel: "2 * engineBytes (every engine rank's parameter bytes written once and read once) + (server) paramBytes * engineRanks (the broadcast to each engine rank); efficiency = trafficBytes / seconds / streamCopyGBs", rows, summary })}`,
  );
}
