/**
 * Weight-sync benchmark: `npm run bench -- sync [--bucket-bytes N]` writes
 * bench/results/sync.json with rows { mode, trainer, engineTp, model, paramBytes,
 * seconds, GBs, efficiency, peakExtraBytes } for the synthetic ~514 MB dense model of
 * bench/sync-rank.ts (fp32), in three setups run under `launch` on real ranks:
 * colocate fsdp2 dp2 → engine tp 1, colocate megatron tp2 → engine tp 2, server
 * megatron tp2 → 2 engine ranks (tp 2).
 *
 * seconds: the slowest rank's best-of-3 sync time. GBs = paramBytes / seconds.
 * efficiency = (2 · paramBytes: every parameter byte read once from the trainer and
 * written once into the engine, the minimum traffic of a sync) / seconds / the
 * STREAM-like copy bandwidth measured in the same run (all ranks copying at once; the sum
 * of their read+write GB/s, capped by the slowest). peakExtraBytes: the largest over the
 * ranks of device peak minus what was allocated when the sync started.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { paramBytes, parseModelConfig } from '../src/index.js';
import { BENCH_CONFIG } from './sync-rank.js';
import { round, writeResults } from './stats.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function launchRanks(nproc: number, args: string[]): Promise<Array<Record<string, any>>> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(ROOT, 'bin', 'launch.mjs'), '--nproc', String(nproc), '--no-prefix', join(ROOT, 'dist', 'bench', 'sync-rank.js'), ...args], { cwd: ROOT, env: { ...process.env, ASCENT_DEVICE_MEMORY: '6GiB' } });
    let out = '', err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`bench sync: launch ${args.join(' ')} exited with ${code}:\n${err.slice(-4000)}`));
      resolve(out.split('\n').filter((l) => l.startsWith('RESULT ')).map((l) => JSON.parse(l.slice(7))));
    });
  });
}

export async function main(argv: string[]): Promise<void> {
  const i = argv.indexOf('--bucket-bytes');
  const bucket = i >= 0 ? Number(argv[i + 1]) : 512 * 1024 * 1024;
  if (!Number.isSafeInteger(bucket) || bucket < 64 || bucket % 64) throw new Error(`Expected --bucket-bytes to be a multiple of 64 but received ${argv[i + 1]}`);
  const cfg = parseModelConfig(BENCH_CONFIG, 'bench');
  const bytes = paramBytes(cfg);
  const model = `dense h${cfg.hiddenSize} L${cfg.numLayers} V${cfg.vocabSize} fp32`;
  const rows = [];
  for (const [nproc, args] of [[2, ['colocate', 'fsdp2']], [2, ['colocate', 'megatron']], [4, ['server', 'megatron']]] as const) {
    const res = await launchRanks(nproc, [...args, String(bucket)]);
    const seconds = Math.max(...res.map((r) => r.seconds));
    const streamGBs = Math.min(...res.map((r) => r.streamGBs)) * res.length;
    const GBs = bytes / seconds / 1e9;
    const row = { mode: res[0]!.mode, trainer: res[0]!.trainer, engineTp: res[0]!.engineTp, model, paramBytes: bytes, seconds: round(seconds, 4), GBs: round(GBs, 3), efficiency: round((2 * bytes) / seconds / 1e9 / streamGBs, 3), peakExtraBytes: Math.max(...res.map((r) => r.peakExtraBytes)), bucketBytes: bucket, streamCopyGBs: round(streamGBs, 2) };
    console.log(JSON.stringify(row));
    rows.push(row);
  }
  writeResults('sync', rows);
}
