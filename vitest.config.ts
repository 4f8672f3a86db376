import { basename } from 'node:path';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

// The longest files, longest first: seconds of each file in the run of the whole suite on
// 2026-11-27 (two workers, 2-core machine shared with other jobs, load average 12-60, so every
// time is ~4x a quiet run's; the order is what matters). Two files run at a time, so the suite
// ends when the longer queue does: starting the long ones first keeps a long file from starting
// last beside an empty worker. Without vitest's cache of last durations (a fresh checkout) the
// default order is by file size, which puts long files near the end (model-training, quickstart
// and bench-trainer ended that run). Only the order depends on this list; a stale entry costs
// time, not correctness. Files below ~45 s there keep vitest's default order with the rest.
const LONGEST_FIRST = [
  'lint', // 314 cold; with warm ESLint / Prettier caches ~9 s of CPU (it stays first: a fresh checkout runs it cold)
  'mpi-grpo', // 213
  'train-fsdp2', // 167
  'model-training', // 144
  'collectives', // 138
  'launch', // 124
  'matmul-bf16', // 118
  'matmul-avx2', // 113
  'megatron-qwen35', // 106
  'grpo-scenarios', // 100
  'sync-server-qwen35', // 89
  'grpo-algorithm', // 87
  'train-checkpoint-sharded-resume', // 87
  'sync-verify-injection', // 87
  'fsdp2-qwen35', // 86
  'bench-collectives', // 85
  'grpo-scenarios-qwen35', // 81
  'dtensor', // 77
  'sync-server', // 75
  'comm-culprits', // 75
  'train-checkpoint', // 74
  'quickstart', // 69
  'mpi-train', // 68
  'grpo-log', // 65
  'mpi-actors', // 62
  'mpi-collectives', // 62
  'sync-server-bf16', // 60
  'train-megatron', // 59
  'sharded-load', // 59
  'install-native', // 57
  'engine-qwen35-tp', // 57
  'launch-collectives', // 56
  'fused-norm-kernels', // 54
  'mpi-launch', // 53
  'train-trim', // 53
  'package', // 50
  'train-fsdp2-bf16', // 50
  'readme', // 49
  'train-router-aux', // 48
  'rollout-engine', // 48
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
