/**
 * Per-step GRPO metrics (what a step record of the run log holds; run-log.ts writes
 * it), the live progress display (cli-progress on a terminal; one plain line per step
 * otherwise, e.g. under launch's prefixed output or CI) and the final step-time
 * summary table (cli-table3).
 */
import { createRequire } from 'node:module';
import type { SingleBar } from 'cli-progress';
import type TableType from 'cli-table3';

// Both are CommonJS and only rank 0 of a GRPO run draws: required on first use, so the other ranks never load them.
const require = createRequire(import.meta.url);

export const PHASES = ['generate', 'reward', 'logprob', 'train', 'sync'] as const;
export type Phase = (typeof PHASES)[number];

export interface StepMetrics {
  step: number;
  /** Learning rate of the step's optimizer update. */
  lr: number;
  /** Mean and std of the total reward (the sum over reward functions). */
  rewardMean: number;
  rewardStd: number;
  /** Mean reward of each reward function by name (one today: the synthetic task's). */
  rewards: Record<string, number>;
  /** Completion lengths in tokens over the step's samples. */
  completionLength: { mean: number; min: number; max: number };
  /** Mean k3 KL to the reference per response token (0 without a reference). */
  kl: number;
  clipFraction: number;
  /**
   * Sampled-token entropy estimate (nats): the mean of −log p(sampled token) over the response tokens,
   * with the engine's log-probs; an unbiased estimate of the sampling policy's entropy.
   */
  entropy: number;
  /**
   * Exact entropy (nats): −Σ_v p_v log p_v of the trainer's softmax over the whole vocabulary, mean
   * over the response tokens of the step's updates. Only computed with the entropy bonus (entropyCoeff > 0).
   */
  entropyExact?: number;
  loss: number;
  gradNorm: number;
  responseTokens: number;
  seconds: Record<Phase, number>;
  syncBytes: number;
  syncGBs: number;
}

const fmt = (x: number, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : String(x));

/** Mean, min and max of the completion lengths (0s for none). */
export function lengthStats(completions: readonly (readonly unknown[])[]): StepMetrics['completionLength'] {
  if (completions.length === 0) return { mean: 0, min: 0, max: 0 };
  // One loop, no map() + reduce(): the driver's step loop inlines this, and an inlined map() returns
  // a HOLEY array where the builtin returns a PACKED one, so reduce's map check deoptimised the
  // whole (large) controller once it was optimised. Summed in the same order as reduce did.
  let sum = 0,
    min = Infinity,
    max = -Infinity;
  for (const c of completions) {
    const n = c.length;
    sum += n;
    if (n < min) min = n;
    if (n > max) max = n;
  }
  return { mean: sum / completions.length, min, max };
}

/** One line per step for logs. */
export function stepLine(m: StepMetrics, total: number): string {
  // A loop, not PHASES.map(...).join(' '): the driver's step loop inlines this, and join's map check
  // failed on the HOLEY array an inlined map() builds (the builtin builds a PACKED one), which
  // deoptimised the whole controller. The same text.
  let t = '';
  for (const p of PHASES) t += `${t === '' ? '' : ' '}${p} ${fmt(m.seconds[p], 2)}s`;
  return `step ${m.step}/${total} reward ${fmt(m.rewardMean)}±${fmt(m.rewardStd)} kl ${fmt(m.kl, 4)} clip ${fmt(m.clipFraction)} entropy ${fmt(m.entropy)}${m.entropyExact === undefined ? '' : ` (exact ${fmt(m.entropyExact)})`} | ${t} | sync ${(m.syncBytes / 2 ** 20).toFixed(1)} MiB @ ${fmt(m.syncGBs, 2)} GB/s`;
}

export class Progress {
  private readonly bar: SingleBar | null;

  constructor(
    readonly total: number,
    readonly out: NodeJS.WriteStream = process.stderr,
    enabled = true,
  ) {
    this.bar =
      enabled && out.isTTY
        ? new (require('cli-progress') as typeof import('cli-progress')).SingleBar(
            { format: 'GRPO {bar} {value}/{total} | reward {reward} | kl {kl} | {sps}s/step', stream: out, hideCursor: true, clearOnComplete: false },
            undefined,
          )
        : null;
  }

  start(from: number): void {
    this.bar?.start(this.total, from, { reward: '-', kl: '-', sps: '-' });
  }

  update(m: StepMetrics, log: (line: string) => void): void {
    const secs = PHASES.reduce((s, p) => s + m.seconds[p], 0);
    if (this.bar) this.bar.update(m.step, { reward: fmt(m.rewardMean), kl: fmt(m.kl, 4), sps: fmt(secs, 2) });
    else log(stepLine(m, this.total));
  }

  stop(): void {
    this.bar?.stop();
  }
}

/** The final summary: mean seconds per phase and share of the step, reward first → last. */
export function summaryTable(steps: readonly StepMetrics[]): string {
  if (steps.length === 0) return 'no steps ran';
  const Table = require('cli-table3') as typeof TableType;
  const table = new Table({ head: ['phase', 'mean s/step', 'share'], style: { head: [], border: [] } });
  const totals = PHASES.map((p) => steps.reduce((s, m) => s + m.seconds[p], 0) / steps.length);
  const all = totals.reduce((a, b) => a + b, 0);
  PHASES.forEach((p, i) => table.push([p, totals[i]!.toFixed(3), `${((100 * totals[i]!) / (all || 1)).toFixed(1)}%`]));
  table.push(['total', all.toFixed(3), '100%']);
  // Each step draws new prompts, so single steps are noisy: compare the means of the first and last tenth.
  const k = Math.max(1, Math.floor(steps.length / 10));
  const head = steps.slice(0, k),
    tail = steps.slice(-k);
  const avg = (xs: readonly StepMetrics[]) => xs.reduce((s, m) => s + m.rewardMean, 0) / xs.length;
  const range = (xs: readonly StepMetrics[]) => (xs.length === 1 ? `step ${xs[0]!.step}` : `steps ${xs[0]!.step}-${xs[xs.length - 1]!.step}`);
  const sync = steps.filter((m) => m.syncBytes > 0);
  const gbs = sync.length ? sync.reduce((s, m) => s + m.syncGBs, 0) / sync.length : 0;
  return `${table.toString()}\nmean reward ${fmt(avg(head))} (${range(head)}) -> ${fmt(avg(tail))} (${range(tail)}); weight sync ${fmt(gbs, 2)} GB/s mean`;
}
