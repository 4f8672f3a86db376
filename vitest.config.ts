import { basename } from 'node:path';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

// The longest files, longest first (seconds on the 2-core machine: quiet, one worker - under load,
// two workers). Two files run at a time, so the suite ends when the longer queue does: starting the
// long ones first keeps a long file from starting last beside an empty worker. Without vitest's cache
// of last durations (a fresh checkout) the default order is by file size, which puts long files near
// the end. Only the order depends on this list; a stale entry costs time, not correctness.
const LONGEST_FIRST = [
  'grpo-scenarios', // 40-80
  'collectives', // 37-140
  'launch', // 48-125
  'sharded-init', // 33-117
  'model-training', // 53-104
  'inspect', // 22-93
  'grpo-algorithm', // 32-91
  'train-checkpoint', // 44-66
  'train-fsdp2', // 29-59
  'package', // npm pack + install (the install reuses this checkout's addon build), then bins and launches
  'mpi-grpo', // 48 (with Open MPI)
  'grpo-scenarios-qwen35', // 45
  'plot', // 45
  'train-megatron', // 16-45
  'train-lora-sharded', // 15-43
  'lint', // 20-42
  'megatron-qwen35', // 39
  'readme', // 20-37
  'launch-collectives', // 28-31
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
