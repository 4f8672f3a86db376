/** The GRPO run log: header line, no silent append to an older run, resume and overwrite, reading back. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../src/runtime/errors.js';
import { RUN_LOG_FORMAT, RunLog, checkRunLogTarget, readRunLog, runLogMode } from '../src/grpo/run-log.js';
import { lengthStats } from '../src/grpo/metrics.js';
import { grpoConfigFromArgs } from '../src/grpo/cli.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'ascent-runlog-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const lines = (p: string) =>
  readFileSync(p, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
const stepRec = (step: number, reward: number) => ({
  step,
  lr: 1e-3,
  rewardMean: reward,
  rewards: { reverse_digits: reward },
  kl: 0,
  loss: 0.5,
  seconds: { generate: 0.1, sync: 0.01 },
  syncBytes: 1024,
});

function gitHead(): string | null {
  try {
    return execFileSync('git', ['rev-parse', 'HEAD'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return null;
  }
}

describe('GRPO run log', () => {
  it('starts with a header: run id, config, versions, git commit, host', () => {
    const p = join(dir, 'new.jsonl');
    const log = RunLog.open(p, { mode: 'new', config: { steps: 3, seed: 7 }, startStep: 0 });
    log.step(stepRec(1, 0.25));
    const [h, s] = lines(p);
    expect(h).toMatchObject({ type: 'header', format: RUN_LOG_FORMAT, resumed: false, startStep: 0, config: { steps: 3, seed: 7 } });
    expect(h!.runId).toMatch(/^\d{8}T\d{6}-[0-9a-f]{8}$/);
    expect(h!.versions).toEqual({ ascent: JSON.parse(readFileSync('package.json', 'utf8')).version, node: process.version });
    expect((h!.host as { cores: number }).cores).toBe(cpus().length);
    expect(h!.loadAvg).toHaveLength(3);
    const head = gitHead();
    expect((h!.git as { commit: string } | null)?.commit ?? null).toBe(head);
    expect(s).toMatchObject({ type: 'step', step: 1, rewards: { reverse_digits: 0.25 } });
  });

  it('a new run refuses a log that holds an older run, and leaves it untouched', () => {
    const p = join(dir, 'taken.jsonl');
    RunLog.open(p, { mode: 'new', config: {}, startStep: 0 }).step(stepRec(1, 0.1));
    const before = readFileSync(p, 'utf8');
    expect(() => RunLog.open(p, { mode: 'new', config: {}, startStep: 0 })).toThrow(ConfigError);
    expect(() => checkRunLogTarget(p, 'new')).toThrow(/already holds run \S+ \(1 step records\).*--log-overwrite.*--resume/);
    expect(readFileSync(p, 'utf8')).toBe(before);
    // An empty file or a missing one is fine.
    writeFileSync(join(dir, 'empty.jsonl'), '');
    expect(() => checkRunLogTarget(join(dir, 'empty.jsonl'), 'new')).not.toThrow();
    expect(() => checkRunLogTarget(join(dir, 'missing.jsonl'), 'new')).not.toThrow();
  });

  it('resume appends a resume header with the same run id; readers keep the last record of each step', () => {
    const p = join(dir, 'resumed.jsonl');
    const first = RunLog.open(p, { mode: 'new', config: {}, startStep: 0 });
    for (const s of [1, 2, 3]) first.step(stepRec(s, s / 10));
    const again = RunLog.open(p, { mode: 'resume', config: {}, startStep: 2 });
    again.step(stepRec(3, 0.9));
    again.step(stepRec(4, 1));
    const all = lines(p);
    expect(all.map((l) => l.type)).toEqual(['header', 'step', 'step', 'step', 'header', 'step', 'step']);
    expect(all[4]).toMatchObject({ resumed: true, startStep: 2, runId: all[0]!.runId });
    const read = readRunLog(p);
    expect(read.headers).toHaveLength(2);
    expect(read.steps.map((s) => [s.step, s.rewardMean])).toEqual([
      [1, 0.1],
      [2, 0.2],
      [3, 0.9],
      [4, 1],
    ]);
  });

  it('resume after a run killed mid-write drops the partial last line, so the log stays readable', () => {
    const p = join(dir, 'killed.jsonl');
    const first = RunLog.open(p, { mode: 'new', config: {}, startStep: 0 });
    first.step(stepRec(1, 0.1));
    writeFileSync(p, `${readFileSync(p, 'utf8')}{"type":"step","st`); // killed while writing step 2
    const again = RunLog.open(p, { mode: 'resume', config: {}, startStep: 1 });
    again.step(stepRec(2, 0.2));
    expect(lines(p).map((l) => l.type)).toEqual(['header', 'step', 'header', 'step']);
    expect(readRunLog(p).steps.map((s) => s.step)).toEqual([1, 2]);
    // A last line that is complete but lost only its newline is kept.
    const q = join(dir, 'no-newline.jsonl');
    RunLog.open(q, { mode: 'new', config: {}, startStep: 0 }).step(stepRec(1, 0.1));
    writeFileSync(q, readFileSync(q, 'utf8').trimEnd());
    RunLog.open(q, { mode: 'resume', config: {}, startStep: 1 }).step(stepRec(2, 0.2));
    expect(readRunLog(q).steps.map((s) => s.step)).toEqual([1, 2]);
  });

  it('overwrite replaces the file; resume and overwrite together are an error', () => {
    const p = join(dir, 'over.jsonl');
    RunLog.open(p, { mode: 'new', config: {}, startStep: 0 }).step(stepRec(1, 0.1));
    const log = RunLog.open(p, { mode: 'overwrite', config: { seed: 2 }, startStep: 0 });
    expect(lines(p)).toHaveLength(1);
    expect(lines(p)[0]).toMatchObject({ type: 'header', runId: log.header.runId, config: { seed: 2 } });
    expect(runLogMode({ resume: true })).toBe('resume');
    expect(runLogMode({ logOverwrite: true })).toBe('overwrite');
    expect(runLogMode({})).toBe('new');
    expect(() => runLogMode({ resume: true, logOverwrite: true })).toThrow(/choose one/);
  });

  it('resume refuses to append to a file that is not a run log; reading tolerates a cut last line and rejects garbage', () => {
    const foreign = join(dir, 'foreign.jsonl');
    writeFileSync(foreign, '{"hello":1}\n');
    expect(() => RunLog.open(foreign, { mode: 'resume', config: {}, startStep: 1 })).toThrow(/not a GRPO run log/);
    const cut = join(dir, 'cut.jsonl');
    writeFileSync(cut, `${JSON.stringify({ step: 1, rewardMean: 0.5 })}\n{"type":"step","st`);
    expect(readRunLog(cut).steps.map((s) => s.step)).toEqual([1]); // a log from before headers existed reads too
    const garbage = join(dir, 'garbage.jsonl');
    writeFileSync(garbage, 'not json\n{"step":1}\n');
    expect(() => readRunLog(garbage)).toThrow(/garbage\.jsonl:1 is not a JSON object/);
  });

  it('completion length statistics', () => {
    expect(lengthStats([[1, 2, 3], [1], [1, 2]])).toEqual({ mean: 2, min: 1, max: 3 });
    expect(lengthStats([])).toEqual({ mean: 0, min: 0, max: 0 });
  });

  it('--log-overwrite reaches the config, and a config file may name its JSON Schema', () => {
    const cfgFile = join(dir, 'cfg.json');
    writeFileSync(cfgFile, JSON.stringify({ $schema: './grpo.schema.json', steps: 5 }));
    const c = grpoConfigFromArgs(['--config', cfgFile, '--log', 'x.jsonl', '--log-overwrite']) as Record<string, unknown>;
    expect(c).toMatchObject({ steps: 5, log: 'x.jsonl', logOverwrite: true });
    expect('$schema' in c).toBe(false);
    expect(grpoConfigFromArgs(['--log', 'y.jsonl']) as Record<string, unknown>).not.toHaveProperty('logOverwrite');
  });
});
