/**
 * `npm run bench -- grpo-step`: the quickstart's GRPO step (examples/grpo.ts under
 * `launch`, server mode, the tiny dense model, 16 prompts x 8 samples) at --nproc 16 and
 * --nproc 2, beside a plain single-process PyTorch loop doing the same step on one thread
 * (bench/torch_grpo_step.py, when an interpreter with torch is installed). Step time is the
 * median over the timed steps of the run log's per-phase seconds (generate, reward,
 * log-prob, train, sync); the weight sync's share of the step is reported too.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BenchUsageError, checkFlags } from './args.js';
import { round, writeResults } from './stats.js';
import { printTable } from './table.js';
import { runTorchScript, torchPython } from './torch-peer.js';

export const USAGE = `Usage: npm run bench -- grpo-step [--steps N] [--nproc LIST]

The quickstart's GRPO step under launch (server mode, tiny dense model, 16 prompts x 8
samples, the 30-step SFT warm-up first) at each --nproc (default 16,2), against a plain
single-process PyTorch GRPO loop on one thread doing the same step (bench/torch_grpo_step.py;
needs python3-torch). Reports seconds per step (median after 2 warm steps), the ratio
Ascent / PyTorch (target <= 0.5) and the weight sync's share of the step (target <= 5%).
  --steps N     GRPO steps per run (default 12)
  --nproc LIST  comma-separated rank counts (default 16,2)
Results: bench/results/grpo-step-<date>.json (and grpo-step-latest.json).
`;

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SKIP = 2;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

function ascentRun(
  nproc: number,
  steps: number,
): { secondsPerStep: number; syncShare: number; phases: Record<string, number>; rewardFirst: number; loadAvg1: number } {
  // The machine is shared: the 1-minute load average as the run starts says how loaded it was.
  const loadAvg1 = loadavg()[0]!;
  const dir = mkdtempSync(join(tmpdir(), 'ascent-grpo-step-'));
  try {
    const log = join(dir, 'run.jsonl');
    const r = spawnSync(
      process.execPath,
      [join(ROOT, 'bin', 'launch.mjs'), '--nproc', String(nproc), join(ROOT, 'examples', 'grpo.ts'), '--steps', String(steps), '--log', log, '--no-progress'],
      { cwd: ROOT, encoding: 'utf8', timeout: 1_800_000 },
    );
    if (r.status !== 0)
      throw new Error(
        `bench grpo-step: the quickstart at --nproc ${nproc} failed (${r.status ?? r.signal}): ${r.stderr.trim().split('\n').slice(-5).join(' | ')}`,
      );
    const recs = readFileSync(log, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type?: string; seconds?: Record<string, number>; rewardMean?: number })
      .filter((x) => x.type === 'step');
    const timed = recs.slice(SKIP);
    const total = (x: (typeof recs)[number]) => Object.values(x.seconds!).reduce((a, b) => a + b, 0);
    const per = timed.map(total);
    const phases: Record<string, number> = {};
    for (const x of timed) for (const [k, v] of Object.entries(x.seconds!)) phases[k] = (phases[k] ?? 0) + v / timed.length;
    const sync = timed.reduce((a, x) => a + x.seconds!.sync!, 0) / timed.reduce((a, x) => a + total(x), 0);
    return { secondsPerStep: median(per), syncShare: sync, phases, rewardFirst: recs[0]!.rewardMean!, loadAvg1 };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function runGrpoStepBench(steps: number, nprocs: number[]) {
  const torch = torchPython();
  const peer = torch
    ? runTorchScript<{ torch: string; threads: number; secondsPerStep: number; phases: Record<string, number>; rewardCurve: number[] }>(
        torch.python,
        'torch_grpo_step.py',
        {
          model: fileURLToPath(new URL('../../examples/models/tiny-dense/config.json', import.meta.url)),
          seed: 0,
          sftSteps: 30,
          sftBatch: 64,
          sftLr: 5e-3,
          lr: 4e-3,
          promptsPerStep: 16,
          numGenerations: 8,
          maxNewTokens: 12,
          clipLow: 0.2,
          clipHigh: 0.28,
          steps,
          skip: SKIP,
        },
      )
    : null;
  const rows = nprocs.map((n) => {
    const a = ascentRun(n, steps);
    return {
      nproc: n,
      secondsPerStep: round(a.secondsPerStep, 4),
      torchSecondsPerStep: peer ? round(peer.secondsPerStep, 4) : null,
      // The target: Ascent's step takes at most 0.5x the PyTorch loop's.
      vsTorch: peer ? round(a.secondsPerStep / peer.secondsPerStep, 3) : null,
      syncShare: round(a.syncShare, 4),
      generate: round(a.phases.generate ?? 0, 4),
      train: round(a.phases.train ?? 0, 4),
      sync: round(a.phases.sync ?? 0, 4),
      loadAvg1: round(a.loadAvg1, 2),
    };
  });
  return {
    suite: 'grpo-step',
    date: new Date().toISOString(),
    config: { model: 'tiny-dense', promptsPerStep: 16, numGenerations: 8, maxNewTokens: 12, steps, skip: SKIP, mode: 'server' },
    rows,
    baselines: { torch: peer ? { version: peer.torch, threads: peer.threads, python: torch!.python, phases: peer.phases } : null },
  };
}

export async function main(argv: string[]): Promise<void> {
  const flags = checkFlags('grpo-step', argv, { valued: ['--steps', '--nproc'] });
  const steps = Number(flags.get('--steps') ?? 12);
  const nprocs = (flags.get('--nproc') ?? '16,2').split(',').map(Number);
  if (!Number.isInteger(steps) || steps <= SKIP) throw new BenchUsageError(`bench grpo-step: --steps must be an integer > ${SKIP}.`);
  if (nprocs.some((n) => !Number.isInteger(n) || n < 2))
    throw new BenchUsageError('bench grpo-step: --nproc must list integers >= 2 (server mode needs a trainer and an engine rank).');
  const r = await runGrpoStepBench(steps, nprocs);
  printTable(r.rows);
  if (!r.baselines.torch) console.log('PyTorch not found: no torch columns (apt-get install python3-torch to compare).');
  else
    console.log(
      `PyTorch baseline: torch ${r.baselines.torch.version} (${r.baselines.torch.python}), ${r.baselines.torch.threads} thread; vsTorch = Ascent s/step / PyTorch s/step (target <= 0.5); syncShare target <= 0.05`,
    );
  console.log(`wrote ${writeResults('grpo-step', r)}`);
}
