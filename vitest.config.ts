import { basename } from 'node:path';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

// The longest files, longest first (seconds of the last clean run of `npm test` on the 2-core
// machine, two workers; ~ marks a file whose time was cut since, measured alone under load).
// Two files run at a time, so the suite ends when the longer queue does: starting the long ones
// first keeps a long file from starting last beside an empty worker. Without vitest's cache of
// last durations (a fresh checkout) the default order is by file size, which puts long files near
// the end. Only the order depends on this list; a stale entry costs time, not correctness.
const LONGEST_FIRST = [
  'launch', // 70
  'grpo-scenarios', // 104, ~68 since the runs of 2 ranks share a launch and those of 4 another
  'train-checkpoint', // 88, ~64 since the crash test kills before each kind of operation, not each one
  'package', // 51: npm pack + install (the install reuses this checkout's addon build), then bins and launches
  'lint', // 49
  'train-fsdp2', // 42
  'launch-collectives', // 38
  'collectives', // 66, ~35 since each rank builds only its own part of the reference
  'mpi-grpo', // 64 (with Open MPI), ~34 since its single-process reference runs once
  'mpi-collectives', // 33
  'readme', // 30
  'bench-collectives', // 29
  'inspect', // 34, ~28 since `ascent inspect` loads only the checkpoint code
  'mpi-launch', // 27
  'sharded-load', // 26
  'megatron-qwen35', // 40, ~24 since each layout's scenarios share a launch
  'sync-server', // 22
  'grpo-scenarios-qwen35', // 57, ~22 since colocated runs share a launch and server runs another
  'grpo-algorithm', // 40, ~21 since its runs share a launch
  'sharded-init', // 55, ~19 since its loads share two launches
  // Below ~18 s now (cases sharing launches): train-megatron, train-checkpoint-sharded-resume,
  // train-lora-sharded, train-router-aux; they keep vitest's default order with the rest.
];

class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rest = await super.sort(files);
    const rank = (f: TestSpecification) => {
      const i = LONGEST_FIRST.indexOf(basename(f.moduleId, '.test.ts'));
      return i < 0 ? LONGEST_FIRST.length : i;
    };
    // Array.prototype.sort is stable: the other files keep vitest's order (cached durations).
    return rest.sort((a, b) => rank(a) - rank(b));
  }
}

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Native addons and worker threads: one forked process per test file, never vm threads.
    pool: 'forks',
    // Two files at a time (vitest's default here is cores - 1 = one). Many files use one core at a
    // time (a single JS thread, a child process at a time), so a second file fills the idle core.
    // Multi-rank tests tolerate sharing the cores: collectives wait on futexes, not spins, once a
    // group has more threads than cores, and every wait has a deadline far above its quiet time.
    maxWorkers: 2,
    sequence: { sequencer: LongestFirst },
    globalSetup: ['test/helpers/global-build.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    teardownTimeout: 10_000,
  },
});
