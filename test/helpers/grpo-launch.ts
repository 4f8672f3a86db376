/**
 * GRPO runs of test/fixtures/grpo/scenario.mjs sharing one launch: starting the ranks (a process,
 * a worker per rank, each importing Ascent) costs more than a short run, so the cases of a test
 * file that need the same number of ranks run one after another in one world. The launch starts
 * when the first case is asked for; each case's own `RESULT` (rank 0, tagged with its index) is
 * handed to the test that asks for it by key, so every test keeps its own assertions.
 */
import { expect } from 'vitest';
import { launchFixture, type LaunchRun } from './parallel-launch.js';

export interface GrpoCase {
  key: string;
  cfg: Record<string, unknown>;
}

export interface GrpoCaseRun<R> {
  /** The shared launch (exit code, all of its output). */
  run: LaunchRun;
  /** Rank 0's RESULT for this case; undefined when the world failed before the case finished. */
  result: R | undefined;
}

/** `cases` is read when the first case is asked for (after beforeAll has made the folders). */
export function sharedGrpoLaunch<R = Record<string, unknown>>(
  nproc: number,
  cases: () => GrpoCase[],
  guardMs: number,
): (key: string) => Promise<GrpoCaseRun<R>> {
  let list: GrpoCase[] | undefined;
  let launched: Promise<LaunchRun> | undefined;
  return async (key) => {
    list ??= cases();
    const keys = list.map((c) => c.key);
    expect(new Set(keys).size, `duplicate case keys: ${keys.join(', ')}`).toBe(keys.length);
    launched ??= launchFixture(nproc, 'test/fixtures/grpo/scenario.mjs', [JSON.stringify(list.map((c) => c.cfg))], {}, guardMs);
    const index = keys.indexOf(key);
    expect(index, `no case ${key} (cases: ${keys.join(', ')})`).toBeGreaterThanOrEqual(0);
    const run = await launched;
    const result = run.results.find((x) => x.case === index) as R | undefined;
    return { run, result };
  };
}
