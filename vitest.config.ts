import { basename } from 'node:path';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

// The longest files, longest first: seconds of each file in the run of the whole suite on
// 2026-11-27 11:45-12:11 UTC (branch suite2; two workers, 2-core machine shared with other jobs, load
// average 8-30, so every time is ~2-4x a quiet run's; the order is what matters). Two files run at a
// time, so the suite ends when the longer queue does: starting the long ones first keeps a long file
// from starting last beside an empty worker. Without vitest's cache of last durations (a fresh
// checkout) the default order is by file size, which puts long files near the end. Only the order
// depends on this list; a stale entry costs time, not correctness. Files below 30 s there keep
// vitest's default order with the rest.
const LONGEST_FIRST = [
  'lint', // 22 with warm ESLint / Prettier caches; cold (a fresh checkout) ~70 s of CPU, so it stays first
  'train-fsdp2', // 162
  'mpi-grpo', // 146
  'launch', // 136
  'grpo-scenarios', // 123
  'model-training', // 109
  'collectives', // 92
  'bench-collectives', // 89
  'train-checkpoint', // 69
  'megatron-qwen35', // 66
  'matmul-bf16', // 61
  'grpo-algorithm', // 59
  'grpo-scenarios-qwen35', // 55
  'package', // 55
  'matmul-avx2', // 52
  'mpi-collectives', // 47
  'mpi-train', // 46
  'fsdp2-qwen35', // 45
  'mpi-actors', // 43
  'grpo-log', // 40
  'launch-collectives', // 39
  'train-checkpoint-sharded-resume', // 39
  'sharded-load', // 38
  'mpi-launch', // 37
  'rollout-engine', // 33
  'bench-trainer', // 32
  'sync-verify-injection', // 31
  'train-megatron', // 31
  'dtensor', // 31
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
