// GRPO in server mode across processes: mpirun -np 2 x launch --nproc-per-node 2 puts the
// trainers (ranks 0-1) on process 0 and the engines (ranks 2-3) on process 1, the
// standalone rollout server layout; -np 4 x --nproc-per-node 1 spreads the fsdp2 trainer
// group itself over processes 0 and 1. The run ends with every weight sync verified and the
// rewards of the same run in one process; an engine process killed mid-run makes the
// trainer process fail at once, naming it.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { mpiProcessPids, mpiSkipReason, mpirunLaunch } from './helpers/mpirun.js';
import { launchFixture } from './helpers/parallel-launch.js';

const skip = mpiSkipReason();
if (skip) console.warn(`[mpi-grpo] skipping the mpirun tests: ${skip}`);

const dir = mkdtempSync(join(tmpdir(), 'ascent-mpi-grpo-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Tiny settings: a 2-step warm-up, then GRPO steps of 4 prompts x 4 samples, every sync verified. */
const flags = (steps: number, log: string) => [
  '--mode',
  'server',
  '--steps',
  String(steps),
  '--prompts',
  '4',
  '--generations',
  '4',
  '--sft-warmup',
  '2',
  '--verify',
  '--no-progress',
  '--log',
  log,
];

interface StepRecord {
  type: 'step';
  step: number;
  rewardMean: number;
  rewardStd: number;
  rewards: Record<string, number>;
  loss: number;
  gradNorm: number;
  verified: { checksums: boolean; fingerprints: number; maxLogprobDiff?: number } | null;
}

function steps(log: string): StepRecord[] {
  const lines = readFileSync(log, 'utf8').trim().split('\n');
  const records = lines.map((l) => JSON.parse(l) as { type: string });
  // One header: rank 0 alone writes the log.
  expect(records.filter((r) => r.type === 'header')).toHaveLength(1);
  return records.filter((r): r is StepRecord => r.type === 'step');
}

/** What a run computes (not its timings): compared between layouts. */
const pick = (s: StepRecord) => ({
  step: s.step,
  rewardMean: s.rewardMean,
  rewardStd: s.rewardStd,
  rewards: s.rewards,
  loss: s.loss,
  gradNorm: s.gradNorm,
});

/**
 * The same run in one process (launch --nproc 4), which both layouts must reproduce bit for bit.
 * Its flags are the same for both (only the log differs, and the run is seeded), so it runs
 * once, when the first test needs it, and the second compares with the same records.
 */
let singleProcessRun: Promise<StepRecord[]> | undefined;
function singleProcess(): Promise<StepRecord[]> {
  singleProcessRun ??= (async () => {
    const oneLog = join(dir, 'one.jsonl');
    const one = await launchFixture(4, 'examples/grpo.ts', flags(2, oneLog), {}, 240_000);
    expect(one.code, one.stderr).toBe(0);
    const within = steps(oneLog);
    expect(within.every((s) => s.verified?.checksums === true)).toBe(true);
    return within;
  })();
  return singleProcessRun;
}

describe.skipIf(skip !== null)('GRPO server mode across processes under mpirun (trainers on process 0, engines on process 1)', () => {
  it('runs to the end with every sync verified and the rewards of the single-process run, bit for bit', async () => {
    const acrossLog = join(dir, 'across.jsonl');
    const r = await mpirunLaunch(2, ['--nproc-per-node', '2', 'examples/grpo.ts', ...flags(2, acrossLog)], {}, 240_000);
    expect(r.code, r.stderr).toBe(0);
    const across = steps(acrossLog);
    expect(across.map((s) => s.step)).toEqual([1, 2]);
    for (const s of across) {
      expect(s.verified, `step ${s.step}`).not.toBeNull();
      expect(s.verified!.checksums).toBe(true);
      expect(s.verified!.fingerprints).toBeGreaterThan(0);
      expect(s.verified!.maxLogprobDiff).toBeLessThanOrEqual(1e-3);
    }
    expect(r.stdout).toMatch(/\(\d+\.\d s, server mode, 2 trainer \/ 2 engine ranks\)/);

    const within = await singleProcess();
    // Bit-equal, not within a tolerance: the run is seeded, the trainer group (ranks 0-1) sits
    // in one process either way (its gradient reductions are the same local ones), a broadcast
    // between processes moves fp32 bytes unchanged, and engine tp = 1 samples on one rank each.
    // So every sample, reward, loss and gradient norm is the same float.
    expect(across.map(pick)).toEqual(within.map(pick));
  }, 600_000);

  it('with the trainer group spanning processes (4 processes x 1 rank: fsdp2 on processes 0 and 1) runs to the end, verified, as in one process', async () => {
    const spanLog = join(dir, 'span.jsonl');
    const r = await mpirunLaunch(4, ['--nproc-per-node', '1', 'examples/grpo.ts', ...flags(2, spanLog)], {}, 240_000);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).not.toMatch(/SlotPool|Aborted/);
    const span = steps(spanLog);
    expect(span.map((s) => s.step)).toEqual([1, 2]);
    for (const s of span) {
      expect(s.verified, `step ${s.step}`).not.toBeNull();
      expect(s.verified!.checksums).toBe(true);
      expect(s.verified!.fingerprints).toBeGreaterThan(0);
      expect(s.verified!.maxLogprobDiff).toBeLessThanOrEqual(1e-3);
    }
    expect(r.stdout).toMatch(/\(\d+\.\d s, server mode, 2 trainer \/ 2 engine ranks\)/);

    const within = await singleProcess();
    // Bit-equal as above: the two trainer ranks now sum their gradients between processes, but a
    // sum of two fp32 values is the same float in either order, and fsdp2's gathers move bytes.
    expect(span.map(pick)).toEqual(within.map(pick));
  }, 600_000);

  it('the engine process killed mid-run makes the trainer process fail fast, naming the dead process (no hang)', async () => {
    const mark = `mpi-grpo-${process.pid}-${Date.now()}`;
    let killedAt = 0;
    let killed: number[] = [];
    const r = await mpirunLaunch(
      2,
      ['--nproc-per-node', '2', '--grace-period', '2', 'examples/grpo.ts', ...flags(8, join(dir, 'killed.jsonl'))],
      // The net legs' deadline is far beyond the fail-fast bound below: a report in time is not a timeout.
      { ASCENT_TEST_MARK: mark, HCCL_EXEC_TIMEOUT: '600' },
      240_000,
      (stdout) => {
        if (killedAt || !/step 1\/8 /.test(stdout)) return;
        killed = mpiProcessPids(mark, 1);
        killedAt = Date.now();
        for (const pid of killed) process.kill(pid, 'SIGKILL');
      },
    );
    expect(killed.length, 'the engine process was found and killed').toBeGreaterThan(0);
    expect(r.code).not.toBe(0);
    expect(Date.now() - killedAt).toBeLessThan(30_000);
    expect(r.stdout).not.toMatch(/step 8\/8 /);
    // Process 0 (the trainers and the controller) reports the engine process as gone.
    expect(r.stderr).toMatch(/\[launch process 0 \(ranks 0-1\)\] rank 0 failed: ActorDiedError: Rank [23] is gone: process 1 \(ranks 2-3\) is gone/);
    // The summary names the same cause either way round: rank 0's failure when it came before
    // mpirun's SIGTERM, or the dead process itself when the SIGTERM came first (on a loaded
    // machine mpirun can notice the death before rank 0's call fails).
    expect(r.stderr).toMatch(
      /\[launch process 0 \(ranks 0-1\)\] FAILED: (.*culprit: rank 0, failed with ActorDiedError|process 1 \(ranks 2-3\) is gone: its actor connection closed \(then mpirun stopped the job\))/,
    );
  }, 300_000);
});
