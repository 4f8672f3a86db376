/**
 * `npm run bench -- grpo-step`: the quickstart's GRPO step (examples/grpo.ts under
 * `launch`, its default mode auto, the tiny dense model, 16 prompts x 8 samples) at --nproc 16 and
 * --nproc 2, beside a plain single-process PyTorch loop doing the same step on one thread
 * (bench/torch_grpo_step.py, when an interpreter with torch is installed). Step time is the
 * median over the timed steps of the run log's per-phase seconds (generate, reward,
 * log-prob, train, sync), and again over the second half of the run, the same steps on
 * both sides: a step gets cheaper as the run goes on, for PyTorch too (completions change
 * length as the policy learns), and for Ascent also because each of its 17 isolates
 * compiles its hot code separately (V8's optimising compiler still took 16% of the CPU in
 * steps 32-40 of a 16-rank run). The weight sync's share of the step is reported too, and the
 * CPU time the launch process (every rank's threads) spent per timed step, with the cores
 * it kept busy on average: the machine is shared, so wall time moves with the load while
 * the CPU per step says how much work a step is; cores near the machine's count say the
 * step is CPU-bound (cut work or threads), well below it latency-bound (cut round trips).
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BenchUsageError, checkFlags } from './args.js';
import { round, writeResults } from './stats.js';
import { printTable } from './table.js';
import { runTorchScript, torchPython } from './torch-peer.js';

export const USAGE = `Usage: npm run bench -- grpo-step [--steps N] [--nproc LIST]

The quickstart's GRPO step under launch (its default mode auto: server when ranks outnumber
the cores, colocate when each rank has one; the mode column says which; tiny dense model, 16 prompts x 8
samples, the 30-step SFT warm-up first) at each --nproc (default 16,2), against a plain
single-process PyTorch GRPO loop on one thread doing the same step (bench/torch_grpo_step.py;
needs python3-torch). Reports seconds per step (median after 2 warm steps) and the ratio Ascent / PyTorch
(target <= 0.5), the same over the run's second half (the steady state: Ascent's 16
isolates are still compiling hot code well into the run, and the policy's completions
change length as it learns, for both sides alike), the weight sync's share of the step
(target <= 5%), the CPU seconds per step of the whole launch process and the cores it
kept busy.
  --steps N     GRPO steps per run (default 80, the quickstart's own run; >= 20 for the
                second-half columns)
  --nproc LIST  comma-separated rank counts (default 16,2)
Results: bench/results/grpo-step-<date>.json (and grpo-step-latest.json).
`;

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SKIP = 2;
/** Runs this short have no second-half columns. */
const MIN_STEADY = 20;

/** The median step of the run's second half (steps > steps / 2), or null for a short run. */
export function steadyMedian(stepSeconds: readonly number[]): number | null {
  return stepSeconds.length >= MIN_STEADY ? median(stepSeconds.slice(Math.floor(stepSeconds.length / 2))) : null;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

/** Clock ticks per second of /proc/<pid>/stat's CPU times. */
function clockTicks(): number {
  const r = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
  const n = Number(r.stdout?.trim());
  return Number.isFinite(n) && n > 0 ? n : 100;
}

/** User + system CPU seconds of process `pid` so far (every thread), or null once it is gone. */
function cpuSeconds(pid: number, ticks: number): number | null {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / ticks; // utime, stime (fields 14, 15)
  } catch {
    return null;
  }
}

/** Runs `args` with `timeoutMs`, sampling its CPU time every 50 ms; rejects on a non-zero exit. */
function runSampled(args: string[], timeoutMs: number, what: string): Promise<Array<{ at: number; cpu: number }>> {
  const ticks = clockTicks();
  const samples: Array<{ at: number; cpu: number }> = [];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr = (stderr + d).slice(-20_000)));
    const timer = setInterval(() => {
      const cpu = cpuSeconds(child.pid!, ticks);
      if (cpu !== null) samples.push({ at: Date.now(), cpu });
    }, 50);
    const deadline = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (e) => {
      clearInterval(timer);
      clearTimeout(deadline);
      reject(e);
    });
    child.on('exit', (code, signal) => {
      clearInterval(timer);
      clearTimeout(deadline);
      if (code === 0) resolve(samples);
      else reject(new Error(`bench grpo-step: ${what} failed (${code ?? signal}): ${stderr.trim().split('\n').slice(-5).join(' | ')}`));
    });
  });
}

/** CPU seconds at wall time `at` (ms): the last sample at or before it (the first when none is). */
function cpuAt(samples: ReadonlyArray<{ at: number; cpu: number }>, at: number): number {
  let v = samples[0]?.cpu ?? 0;
  for (const s of samples) if (s.at <= at) v = s.cpu;
  return v;
}

interface AscentRun {
  /** server or colocate: what the quickstart's default mode (auto) chose. */
  mode: string;
  secondsPerStep: number;
  /** Median over the run's second half (null for runs under MIN_STEADY steps). */
  steadySecondsPerStep: number | null;
  syncShare: number;
  phases: Record<string, number>;
  rewardFirst: number;
  loadAvg1: number;
  cpuPerStep: number;
  cores: number;
}

async function ascentRun(nproc: number, steps: number): Promise<AscentRun> {
  // The machine is shared: the 1-minute load average as the run starts says how loaded it was.
  const loadAvg1 = loadavg()[0]!;
  const dir = mkdtempSync(join(tmpdir(), 'ascent-grpo-step-'));
  try {
    const log = join(dir, 'run.jsonl');
    const samples = await runSampled(
      [join(ROOT, 'bin', 'launch.mjs'), '--nproc', String(nproc), join(ROOT, 'examples', 'grpo.ts'), '--steps', String(steps), '--log', log, '--no-progress'],
      1_800_000,
      `the quickstart at --nproc ${nproc}`,
    );
    if (!existsSync(log)) throw new Error(`bench grpo-step: the quickstart at --nproc ${nproc} wrote no run log (${log}).`);
    const lines = readFileSync(log, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type?: string; seconds?: Record<string, number>; rewardMean?: number; time?: string; config?: { mode?: string } });
    // The mode the quickstart's `auto` resolved to on this host (the run log's header holds the parsed config).
    const mode = lines.find((x) => x.type === 'header')?.config?.mode ?? 'unknown';
    const recs = lines.filter((x) => x.type === 'step');
    const timed = recs.slice(SKIP);
    const total = (x: (typeof recs)[number]) => Object.values(x.seconds!).reduce((a, b) => a + b, 0);
    const per = timed.map(total);
    const phases: Record<string, number> = {};
    for (const x of timed) for (const [k, v] of Object.entries(x.seconds!)) phases[k] = (phases[k] ?? 0) + v / timed.length;
    const sync = timed.reduce((a, x) => a + x.seconds!.sync!, 0) / timed.reduce((a, x) => a + total(x), 0);
    // CPU over the timed steps: from the end of the last untimed step to the end of the last step.
    const from = Date.parse(recs[SKIP - 1]!.time!),
      to = Date.parse(recs.at(-1)!.time!);
    const cpu = cpuAt(samples, to) - cpuAt(samples, from);
    return {
      mode,
      secondsPerStep: median(per),
      steadySecondsPerStep: steadyMedian(recs.map(total)),
      syncShare: sync,
      phases,
      rewardFirst: recs[0]!.rewardMean!,
      loadAvg1,
      cpuPerStep: cpu / timed.length,
      cores: to > from ? cpu / ((to - from) / 1000) : 0,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function runGrpoStepBench(steps: number, nprocs: number[]) {
  const { peer: torch, reason: torchReason } = torchPython();
  const peer = torch
    ? runTorchScript<{ torch: string; threads: number; secondsPerStep: number; phases: Record<string, number>; rewardCurve: number[]; stepSeconds: number[] }>(
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
  const torchSteady = peer ? steadyMedian(peer.stepSeconds) : null;
  const rows = [];
  for (const n of nprocs) {
    const a = await ascentRun(n, steps);
    rows.push({
      nproc: n,
      mode: a.mode,
      secondsPerStep: round(a.secondsPerStep, 4),
      torchSecondsPerStep: peer ? round(peer.secondsPerStep, 4) : null,
      // The target: Ascent's step takes at most 0.5x the PyTorch loop's.
      vsTorch: peer ? round(a.secondsPerStep / peer.secondsPerStep, 3) : null,
      // The same over the second half of both runs.
      steadySecondsPerStep: a.steadySecondsPerStep === null ? null : round(a.steadySecondsPerStep, 4),
      torchSteady: torchSteady === null ? null : round(torchSteady, 4),
      vsTorchSteady: a.steadySecondsPerStep !== null && torchSteady ? round(a.steadySecondsPerStep / torchSteady, 3) : null,
      syncShare: round(a.syncShare, 4),
      generate: round(a.phases.generate ?? 0, 4),
      train: round(a.phases.train ?? 0, 4),
      sync: round(a.phases.sync ?? 0, 4),
      // CPU seconds per timed step (every thread of the launch process) and the cores that kept busy.
      cpuPerStep: round(a.cpuPerStep, 4),
      cores: round(a.cores, 2),
      loadAvg1: round(a.loadAvg1, 2),
    });
  }
  return {
    suite: 'grpo-step',
    date: new Date().toISOString(),
    config: { model: 'tiny-dense', promptsPerStep: 16, numGenerations: 8, maxNewTokens: 12, steps, skip: SKIP, mode: 'auto' },
    rows,
    baselines: {
      torch: peer
        ? { version: peer.torch, threads: peer.threads, python: torch!.python, blas: torch!.blas, blasLibraries: torch!.blasLibraries, phases: peer.phases }
        : null,
      torchMissing: torchReason || null,
    },
  };
}

export async function main(argv: string[]): Promise<void> {
  const flags = checkFlags('grpo-step', argv, { valued: ['--steps', '--nproc'] });
  const steps = Number(flags.get('--steps') ?? 80);
  const nprocs = (flags.get('--nproc') ?? '16,2').split(',').map(Number);
  if (!Number.isInteger(steps) || steps <= SKIP) throw new BenchUsageError(`bench grpo-step: --steps must be an integer > ${SKIP}.`);
  if (nprocs.some((n) => !Number.isInteger(n) || n < 1)) throw new BenchUsageError('bench grpo-step: --nproc must list positive integers.');
  const r = await runGrpoStepBench(steps, nprocs);
  printTable(r.rows);
  if (!r.baselines.torch) console.log(r.baselines.torchMissing);
  else
    console.log(
      `PyTorch baseline: torch ${r.baselines.torch.version} (${r.baselines.torch.python}, ${r.baselines.torch.blas} BLAS), ${r.baselines.torch.threads} thread; vsTorch = Ascent s/step / PyTorch s/step over steps ${SKIP + 1}-${steps}, vsTorchSteady over steps ${Math.floor(steps / 2) + 1}-${steps} (target <= 0.5); syncShare target <= 0.05`,
    );
  console.log(`wrote ${writeResults('grpo-step', r)}`);
}
