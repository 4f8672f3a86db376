/**
 * The GRPO run log written by a real run under `launch` (examples/grpo.ts): header
 * first, step records with the logged fields, a second run refused on the same file,
 * `--log-overwrite` replacing it.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';

let dir: string;
beforeAll(() => {
  ensureParallelBuilt();
  dir = mkdtempSync(join(tmpdir(), 'ascent-grpo-log-'));
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// The tiny model's full training state needs more than the helper's 64 MiB default.
const MEM = { ASCENT_DEVICE_MEMORY: '512MiB' };
const records = (p: string) =>
  readFileSync(p, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, any>);

describe('GRPO run log under launch', () => {
  it('header then one record per step; a second run refuses the file; --log-overwrite replaces it', async () => {
    const log = join(dir, 'run.jsonl');
    const argsFor = (steps: number) => [
      '--steps',
      String(steps),
      '--sft-warmup',
      '2',
      '--prompts',
      '2',
      '--generations',
      '4',
      '--max-new-tokens',
      '6',
      '--lr',
      '0.003',
      '--no-progress',
      '--log',
      log,
    ];
    const args = argsFor(3);
    const first = await launchFixture(2, 'examples/grpo.ts', args, MEM, 170_000);
    expect(first.code, first.stderr).toBe(0);
    const recs = records(log);
    expect(recs.map((r) => r.type)).toEqual(['header', 'step', 'step', 'step']);
    const [h, ...steps] = recs;
    expect(h).toMatchObject({
      format: 'ascent.grpo.log/1',
      resumed: false,
      startStep: 0,
      config: { steps: 3, promptsPerStep: 2, numGenerations: 4, log, logOverwrite: false },
    });
    expect(h!.versions.node).toBe(process.version);
    steps.forEach((s, i) => {
      expect(s.step).toBe(i + 1);
      expect(s.lr).toBe(0.003);
      expect(s.rewards).toEqual({ reverse_digits: s.rewardMean });
      expect(s.completionLength.min).toBeGreaterThanOrEqual(1);
      expect(s.completionLength.max).toBeLessThanOrEqual(6);
      expect(s.completionLength.mean).toBeGreaterThanOrEqual(s.completionLength.min);
      expect(s.completionLength.mean).toBeLessThanOrEqual(s.completionLength.max);
      expect(Object.keys(s.seconds)).toEqual(['generate', 'reward', 'logprob', 'train', 'sync']);
      expect(s.syncBytes).toBeGreaterThan(0);
      for (const k of ['kl', 'clipFraction', 'entropy', 'loss']) expect(Number.isFinite(s[k]), k).toBe(true);
    });
    const before = readFileSync(log, 'utf8');

    const again = await launchFixture(2, 'examples/grpo.ts', args, MEM, 120_000);
    // Bad input, found before any rank starts (examples/grpo.ts's validateArgs): one line, exit 2.
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(
      /^launch: .*the log .*run\.jsonl already holds run \S+ \(3 step records\); a new run does not append to an older run's log\. HINT: .*--log-overwrite.* \(checked before starting the ranks\)$/m,
    );
    expect(again.stderr.trim().split('\n')).toHaveLength(1);
    expect(readFileSync(log, 'utf8')).toBe(before);

    const over = await launchFixture(2, 'examples/grpo.ts', [...argsFor(2), '--log-overwrite'], MEM, 170_000);
    expect(over.code, over.stderr).toBe(0);
    const replaced = records(log);
    expect(replaced.map((r) => r.type)).toEqual(['header', 'step', 'step']);
    expect(replaced[0]!.runId).not.toBe(h!.runId);
  }, 300_000);
});
