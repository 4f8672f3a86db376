/**
 * Benchmark harness: `npm run bench -- <suite> [suite flags]`.
 * Every suite reports ratios measured in the same run (see the README, Benchmarks).
 */
const SUITES: Record<string, () => Promise<{ main(argv: string[]): Promise<void> }>> = {
  rpc: () => import('./rpc.js'),
  collectives: () => import('./collectives.js'),
  'model-kernels': () => import('./model-kernels.js'),
  kernels: () => import('./kernels.js'),
  'train-step': () => import('./train-step.js'),
  trainer: () => import('./trainer.js'),
  sync: () => import('./sync.js'),
};

async function run(): Promise<number> {
  const [suite, ...rest] = process.argv.slice(2);
  if (!suite || !(suite in SUITES)) {
    process.stderr.write(`bench: ${suite ? `unknown suite ${JSON.stringify(suite)}` : 'no suite given'}.\nUsage: npm run bench -- <suite> [flags]\nSuites: ${Object.keys(SUITES).join(', ')}\n`);
    return 2;
  }
  const mod = await SUITES[suite]!();
  await mod.main(rest);
  return 0;
}

process.exitCode = await run();
