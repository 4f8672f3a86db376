/**
 * The server-mode sync cases of test/fixtures/sync/server.mjs sharing one launch of 4 ranks per
 * engine dtype: starting the ranks costs more than a case, so the cases of a test file run one
 * after the other in one world (the launch starts when the first test asks for a case). Each
 * test gets the launch's exit and output and its own case's RESULT lines, one per rank.
 */
import { launchFixture, type LaunchRun } from './parallel-launch.js';

/** Model, trainer kind, bucket bytes: the cases of sync-server and sync-server-bf16. */
export const SERVER_SYNC_CASES = [
  ['moe', 'megatron', 1 << 20],
  ['dense', 'megatron', 4096],
  ['moe', 'fsdp2', 1 << 20],
  ['moe', 'megatron-dp2', 1 << 20],
] as const;

type ServerCase = (typeof SERVER_SYNC_CASES)[number];

export function sharedServerSync(dtype: 'float32' | 'bfloat16'): (...c: ServerCase) => Promise<LaunchRun> {
  const keyOf = (c: ServerCase) => c.join(' ');
  let launched: Promise<LaunchRun> | undefined;
  return async (...c) => {
    launched ??= launchFixture(
      4,
      'test/fixtures/sync/server.mjs',
      [JSON.stringify(SERVER_SYNC_CASES.map((x) => ({ key: keyOf(x), which: x[0], kind: x[1], bucket: x[2], dtype })))],
      {},
      // One case alone had the helper's 55 s guard.
      55_000 * SERVER_SYNC_CASES.length,
    );
    const run = await launched;
    return { ...run, results: run.results.filter((r) => r.key === keyOf(c)) };
  };
}
