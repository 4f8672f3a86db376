import { basename } from 'node:path';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

// The longest files, longest first: seconds of each file in the run of the whole suite on
// 2026-11-27 17:16-18:01 UTC (branch suite3 before its fixture change; two workers, 2-core machine shared
// with other jobs, load average 11-47, so every time is ~3-6x a quiet run's; the order is what matters).
// Two files run at a time, so the suite ends when the longer queue does: starting the long ones first
// keeps a long file from starting last beside an empty worker. Without vitest's cache of last durations
// (a fresh checkout) the default order is by file size, which puts long files near the end. Only the
// order depends on this list; a stale entry costs time, not correctness. Files below 45 s there keep
// vitest's default order with the rest.
const LONGEST_FIRST = [
  'lint', // 236 cold (a fresh checkout: no ESLint / Prettier cache); ~35 s with warm caches, so it stays first
  'launch', // 231
  'train-fsdp2', // 180
  'grpo-scenarios', // 166
  'collectives', // 159
  'model-training', // 140
  'package', // 110
  'bench-format', // 107
  'train-checkpoint', // 85
  'matmul-avx2', // 81
  'inspect', // 74
  'mpi-grpo', // 72
  'fsdp2-qwen35', // 70
  'matmul-bf16', // 67
  'bench-collectives', // 65
  'grpo-algorithm', // 65
  'mpi-train', // 64
  'train-checkpoint-sharded-resume', // 61
  'grpo-scenarios-qwen35', // 61
  'train-trim', // 60
  'launch-collectives', // 60
  'install-native', // 59
  'public-api', // 59
  'rollout-engine', // 57
  'sharded-load', // 56
  'train-megatron', // 55
  'sync-server', // 54
  'megatron-qwen35', // 52
  'mpi-collectives', // 51
  'profiler', // 48
  'data-tokenizer', // 48
  'readme', // 48
  'mpi-actors', // 47
  'sync-server-qwen35', // 47
  'grpo-log', // 45
  'train-fsdp2-bf16', // 45
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
