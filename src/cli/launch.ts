/**
 * `ascent launch --nproc N [flags] entry.(ts|mjs|js) [entry args]` (also `launch ...`)
 *
 * Flags are parsed with commander, validated with zod (LaunchOptionsSchema); any
 * bad flag prints what was wrong and the usage, and exits with code 2. torchrun's
 * spellings are accepted where they mean the same on one node (`--nproc-per-node`,
 * `--nnodes 1`, `--node-rank 0`, `--log-dir`); multi-node values are a clear error.
 * Several processes come from mpirun instead: `mpirun -np P ascent launch
 * --nproc-per-node N entry.ts` runs P x N ranks (runtime/actor-system/mpi-job.ts).
 */
import { Command, CommanderError, Option } from 'commander';
import { ConfigError, InvalidArgumentError } from '../runtime/errors.js';
import type { EXIT_USAGE as LAUNCHER_EXIT_USAGE } from '../runtime/actor-system/launcher.js';
import { resolveModuleUrl } from '../runtime/actor-system/module-loader.js';
import { parsePatchSwitch } from '../runtime/patches.js';
import { ascentVersion } from '../runtime/actor-system/run-meta.js';

const ENTRY_EXT = /\.(ts|mts|cts|js|mjs|cjs)$/;
// The launcher (actor system, devices, zod's option schemas) is imported once the flags passed
// the checks that need none of it: --help, --version and a bad flag answer without loading it.
// Its exit code for usage errors, typed from the launcher so the two cannot drift apart.
const EXIT_USAGE: typeof LAUNCHER_EXIT_USAGE = 2;

function buildProgram(): Command {
  return (
    new Command('launch')
      .description('Run an SPMD entry on N ranks (worker threads, one device each), like torchrun.')
      .usage('--nproc N [flags] entry.(ts|mjs|js) [entry args...]')
      .version(ascentVersion(), '-V, --version', 'print the version and exit')
      // Checked after parsing, so that an unknown flag is named as such first.
      .option('--nproc <n>', 'number of ranks (positive integer; required)')
      .option('--nproc-per-node <n>', 'torchrun spelling of --nproc (ranks per process; under mpirun -np P the run has P x N ranks)')
      .option('--nnodes <n>', 'number of nodes: only 1 is supported')
      .option('--node-rank <n>', 'rank of this node: only 0 is supported')
      .option('--log-dir <dir>', "also write each rank's output to <dir>/rank-<N>.log")
      .option('--rank0-only', 'show only rank 0 output (failure reports always show)', false)
      .option('--no-prefix', 'do not prefix output lines with [rank N]')
      .addOption(new Option('--grace-period <seconds>', 'time ranks get to stop after a failure or signal').default('5'))
      .addOption(new Option('--max-time <seconds>', 'wall-clock limit; a run still going then is stopped with a report (exit 124)'))
      .addOption(new Option('--device-memory <size>', 'device memory per rank, e.g. 512MiB (default ASCENT_DEVICE_MEMORY or 16GiB)'))
      .addOption(new Option('--enable-npu-model-patch <bool>', 'model patches (fast/fused kernels) on or off: true or false'))
      .argument('<entry>', 'entry module exporting main(ctx)')
      .argument('[args...]', 'arguments passed to the entry (ctx.args)')
      .passThroughOptions()
      .helpOption('-h, --help', 'show this help')
      .exitOverride()
      .configureOutput({ writeErr: () => {}, writeOut: (s) => process.stdout.write(s) })
  );
}

function seconds(flag: string, raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  if (!/^\d+(\.\d+)?$/.test(raw.trim())) {
    throw new ConfigError(`Expected a non-negative number of seconds for ${flag} but received ${JSON.stringify(raw)}.`);
  }
  return Math.round(Number(raw) * 1000);
}

function positiveIntFlag(flag: string, raw: string): number {
  if (!/^\d+$/.test(raw.trim()) || Number(raw) < 1) {
    throw new ConfigError(`Expected a positive integer for ${flag} but received ${JSON.stringify(raw)}.`);
  }
  return Number(raw);
}

/** --nproc / --nproc-per-node (one of them, or both equal), --nnodes 1, --node-rank 0. */
function rankCount(o: Record<string, unknown>): number {
  const single = (flag: string, raw: unknown, ok: RegExp, what: string) => {
    if (raw !== undefined && !ok.test(String(raw).trim())) {
      throw new ConfigError(
        `${flag} ${String(raw)} is not supported yet: Ascent runs ${what}. HINT: drop ${flag} (or pass ${flag} ${flag === '--nnodes' ? '1' : '0'}).`,
      );
    }
  };
  single('--nnodes', o.nnodes, /^1(:1)?$/, 'on one node (its ranks are threads of one process)');
  single('--node-rank', o.nodeRank, /^0$/, 'on one node, node rank 0');
  const a = o.nproc === undefined ? undefined : positiveIntFlag('--nproc', String(o.nproc));
  const b = o.nprocPerNode === undefined ? undefined : positiveIntFlag('--nproc-per-node', String(o.nprocPerNode));
  if (a !== undefined && b !== undefined && a !== b)
    throw new ConfigError(`--nproc ${a} and --nproc-per-node ${b} disagree; they are the same flag. HINT: pass one of them.`);
  const n = a ?? b;
  if (n === undefined) throw new ConfigError('required option --nproc N (or --nproc-per-node N) not specified.');
  return n;
}

function usageError(program: Command, message: string): number {
  process.stderr.write(`launch: ${message}\n\n${program.helpInformation()}`);
  return EXIT_USAGE;
}

/** Runs the CLI; resolves to the process exit code. */
export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  let parsed: { opts: Record<string, unknown>; entry: string; args: string[] };
  try {
    program.parse(argv, { from: 'user' });
    const [entry, args] = program.processedArgs as [string, string[]];
    parsed = { opts: program.opts(), entry, args: args ?? [] };
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') return 0;
      return usageError(program, err.message.replace(/^error: /, ''));
    }
    throw err;
  }

  let options;
  try {
    const o = parsed.opts;
    const nproc = rankCount(o);
    if (!ENTRY_EXT.test(parsed.entry)) {
      throw new ConfigError(`The entry ${JSON.stringify(parsed.entry)} must be a .ts, .mts, .js or .mjs file exporting main(ctx).`);
    }
    resolveModuleUrl(parsed.entry, 'entry file');
    const env: Record<string, string> = {};
    if (o.enableNpuModelPatch !== undefined) {
      env.ASCENT_ENABLE_NPU_MODEL_PATCH = String(parsePatchSwitch(String(o.enableNpuModelPatch), '--enable-npu-model-patch'));
    }
    const flags = {
      env,
      nproc,
      ...(typeof o.logDir === 'string' ? { logDir: o.logDir } : {}),
      entry: parsed.entry,
      entryArgs: parsed.args,
      rank0Only: Boolean(o.rank0Only),
      prefix: o.prefix !== false,
      gracePeriodMs: seconds('--grace-period', o.gracePeriod as string | undefined),
      maxTimeMs: seconds('--max-time', o.maxTime as string | undefined),
      deviceMemory: o.deviceMemory,
    };
    const { LaunchOptionsSchema, formatIssues } = await import('../runtime/config.js');
    const r = LaunchOptionsSchema.safeParse(flags);
    if (!r.success) throw new ConfigError(`invalid flags:\n${formatIssues(r.error)}`);
    options = r.data;
  } catch (err) {
    if (err instanceof ConfigError || err instanceof InvalidArgumentError) return usageError(program, err.message);
    throw err;
  }
  try {
    // Bad environment values (checked first thing in launch()) are one line naming the variable (no usage: the flags were fine).
    const { launch } = await import('../runtime/actor-system/launcher.js');
    const result = await launch(options);
    return result.exitCode;
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`launch: ${err.message}\n`);
      return EXIT_USAGE;
    }
    throw err;
  }
}
