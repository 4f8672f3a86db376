/**
 * vitest's globalSetup: runs once in the main process before any test file. When dist/ is older
 * than the sources (a `vitest run` without `npm test`'s build), it builds here, once, so test files
 * running side by side never start their own tsc into the same dist/ while others import from it.
 */
import { ensureParallelBuilt } from './parallel-launch.js';

export default function setup(): void {
  ensureParallelBuilt();
}
