/**
 * `ascent <command>`: the launcher and tools around a run.
 *   ascent launch --nproc N entry.ts   run an entry on N ranks (src/cli/launch.ts; `launch` is an alias)
 *   ascent grpo [--nproc N] [flags]     GRPO on your model folder, dataset and rewards (`ascent grpo --help`)
 *   ascent trace <folder|file>   explain flight-recorder dumps of aborted communicators
 *   ascent inspect <path>        validate a safetensors checkpoint and list its tensors
 *   ascent plot <files...>       draw run logs and benchmark results to SVG and PNG
 *   ascent schema <config>       print a config file's JSON Schema
 *   ascent profile <dir>         merge an ASCENT_PROFILE run's traces, print the top ops
 */
import { fileURLToPath } from 'node:url';
import { Command, CommanderError } from 'commander';
import { InvalidArgumentError } from '../runtime/errors.js';
import { registerInspect } from './inspect.js';
import { registerPlot } from './plot.js';
import { registerSchema } from './schema-command.js';
import { registerProfile } from './profile.js';
import { builtFile } from '../runtime/paths.js';

// Every command's code (GRPO, configs, checkpoints, flight-recorder dumps) is imported when that
// command runs, not here: `ascent launch` and `ascent --help` load only commander and the
// command list, not the GRPO driver and its zod schemas (about 200 modules before).

function buildProgram(out: string[]): Command {
  const program = new Command('ascent')
    .description('Ascent tools')
    .exitOverride()
    .configureOutput({ writeErr: () => {}, writeOut: (s) => process.stdout.write(s) });
  program
    .command('trace')
    .description('explain flight-recorder dumps: which rank missed which collective, which fingerprints differ')
    .argument('<path>', 'folder of dumps (ASCENT_TRACE_DIR) or one dump file')
    .option('--json', 'print the findings as JSON')
    .action(async (path: string, opts: { json?: boolean }) => {
      const { explainDump, formatReport, readDumps } = await import('../runtime/actor-system/trace-explain.js');
      const reports = readDumps(path).map(({ file, dump }) => explainDump(dump, file));
      out.push(opts.json ? JSON.stringify(reports, null, 2) : reports.map(formatReport).join('\n\n'));
    });
  registerInspect(program);
  registerPlot(program);
  registerSchema(program);
  registerProfile(program);
  // `ascent launch ...` is handled by the launch CLI itself (main below); listed here for the help.
  program
    .command('launch')
    .description('run an SPMD entry on N ranks, like torchrun (`ascent launch --help` for its flags)')
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments();
  program
    .command('grpo')
    .description(
      'GRPO on your model folder, dataset and rewards under launch: ascent grpo [--nproc N] --model DIR --dataset FILE --reward MODULE#EXPORT (`ascent grpo --help`)',
    )
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments();
  return program;
}

export async function main(argv: string[]): Promise<number> {
  if (argv[0] === 'launch') return (await import('./launch.js')).main(argv.slice(1));
  if (argv[0] === 'grpo') return grpo(argv.slice(1));
  const out: string[] = [];
  const program = buildProgram(out);
  if (argv.length === 0) {
    process.stdout.write(program.helpInformation());
    return 0;
  }
  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.help' || err.code === 'commander.version') return 0;
      process.stderr.write(`ascent: ${err.message.replace(/^error: /, '')}\n\n${program.helpInformation()}`);
      return 2;
    }
    if (err instanceof InvalidArgumentError) {
      process.stderr.write(`ascent: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
  if (out.length) process.stdout.write(`${out.join('\n')}\n`);
  return 0;
}

/** `ascent grpo [--nproc N] [flags]`: launch's N ranks (default 2) running the packaged GRPO entry. */
async function grpo(args: string[]): Promise<number> {
  const entry = fileURLToPath(builtFile('grpo/entry.js'));
  const at = args.findIndex((a) => a === '--nproc' || a === '--nproc-per-node');
  let nproc = '2';
  const rest = [...args];
  if (at >= 0) {
    nproc = rest[at + 1] ?? '';
    rest.splice(at, 2);
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    const { grpoUsage } = await import('../grpo/cli.js');
    process.stdout.write(`Usage: ascent grpo [--nproc N] [flags]   (N ranks, default 2; server mode puts half of them on the engine)\n\n${grpoUsage()}`);
    return 0;
  }
  return (await import('./launch.js')).main(['--nproc', nproc, entry, ...rest]);
}
