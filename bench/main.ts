/**
 * Benchmark harness: `npm run bench -- <suite> [suite flags]`; `--help` after a suite
 * prints its usage and exits 0; a bad flag prints the error and the usage and exits 2.
 * Every suite reports ratios measured in the same run and writes a new result file
 * with the run's metadata (bench/results.ts).
 */
import { CommanderError } from 'commander';
import { BenchUsageError } from './args.js';

interface Suite {
  main(argv: string[]): Promise<void>;
  USAGE: string;
}

const SUITES: Record<string, () => Promise<Suite>> = {
  rpc: () => import('./rpc.js'),
  collectives: () => import('./collectives.js'),
  'model-kernels': () => import('./model-kernels.js'),
  kernels: () => import('./kernels.js'),
  'train-step': () => import('./train-step.js'),
  'grpo-step': () => import('./grpo-step.js'),
  trainer: () => import('./trainer.js'),
  sync: () => import('./sync.js'),
};

const HELP = ['--help', '-h'];

function harnessUsage(): string {
  return `Usage: npm run bench -- <suite> [flags]   (or: node dist/bench/main.js <suite> [flags])\nSuites: ${Object.keys(SUITES).join(', ')}\n\`npm run bench -- <suite> --help\` prints a suite's flags.\n`;
}

async function run(argv: string[]): Promise<number> {
  const [suite, ...rest] = argv;
  if (suite !== undefined && HELP.includes(suite)) {
    process.stdout.write(harnessUsage());
    return 0;
  }
  if (!suite || !(suite in SUITES)) {
    process.stderr.write(`bench: ${suite ? `unknown suite ${JSON.stringify(suite)}` : 'no suite given'}.\n${harnessUsage()}`);
    return 2;
  }
  const mod = await SUITES[suite]!();
  if (rest.some((a) => HELP.includes(a))) {
    process.stdout.write(mod.USAGE);
    return 0;
  }
  try {
    await mod.main(rest);
  } catch (e) {
    if (e instanceof BenchUsageError || e instanceof CommanderError) {
      process.stderr.write(`${e.message.replace(/^error: /, 'bench: ')}\n\n${mod.USAGE}`);
      return 2;
    }
    throw e;
  }
  return 0;
}

process.exitCode = await run(process.argv.slice(2));
