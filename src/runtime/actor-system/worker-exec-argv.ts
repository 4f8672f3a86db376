/**
 * The node options rank workers start with: the parent's `process.execArgv`, minus
 * what a worker cannot take.
 *
 * Two kinds are dropped:
 * - options that only make sense for a main script (`-e`, `--input-type`, ...): a worker that
 *   inherits `--input-type` (from `node -e`) refuses to start;
 * - options `new Worker` refuses: V8 options (`--max-old-space-size=8192`, `--expose-gc`,
 *   `--stack-size`, `--perf-basic-prof`) and per-process ones (`--title`). They are already in
 *   effect for every isolate of the process, workers included, so dropping them loses nothing.
 *   Passing them threw ERR_WORKER_INVALID_EXEC_ARGV out of `World.create`, so
 *   `node --max-old-space-size=8192 $(which launch) ...` could not start a single rank.
 *
 * Node has no public list of the options a worker refuses. When the parent has any options
 * left after the first filter, one probe worker is constructed with them: `new Worker` checks
 * execArgv before it starts a thread and names the refused options in its error. The answer is
 * cached for the process.
 */
import { Worker } from 'node:worker_threads';

/** The parent's node options minus those that only make sense for a main script. */
export function workerExecArgv(argv: readonly string[] = process.execArgv): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (/^--input-type(=|$)/.test(a)) {
      if (a === '--input-type') i++;
      continue;
    }
    if (a === '-e' || a === '--eval' || a === '-p' || a === '--print') {
      i++;
      continue;
    }
    if (/^--(eval|print)=/.test(a) || a === '-i' || a === '--interactive') continue;
    out.push(a);
  }
  return out;
}

/** The options named in an ERR_WORKER_INVALID_EXEC_ARGV message, or null when it does not name them. */
export function refusedOptions(message: string): string[] | null {
  const m = /invalid execArgv flags: (.+)$/.exec(message.trim());
  if (!m) return null;
  const names = m[1]!
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  return names.length > 0 ? names : null;
}

/**
 * `argv` without the `refused` options. An option refused by name (`--title`) also loses its
 * value when that came as the next element (`--title x`): in execArgv, an element that does not
 * start with `-` is the value of the option before it.
 */
export function withoutOptions(argv: readonly string[], refused: readonly string[]): string[] {
  const drop = new Set(refused);
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (!drop.has(a) && !drop.has(a.split('=')[0]!)) {
      out.push(a);
      continue;
    }
    if (!a.includes('=') && i + 1 < argv.length && !argv[i + 1]!.startsWith('-')) i++;
  }
  return out;
}

let cached: { argv: string[]; dropped: string[] } | undefined;

/**
 * The execArgv for a rank worker of this process (cached). The first call that drops
 * options emits one process warning (code ASCENT_WORKER_EXEC_ARGV) naming them.
 */
export function workerSafeExecArgv(): string[] {
  if (cached) return cached.argv;
  let argv = workerExecArgv();
  const dropped: string[] = [];
  // Each probe drops at least one option, so this ends; the bound only guards a Node whose
  // message would name options that are not in argv.
  for (let round = 0; argv.length > 0 && round < 8; round++) {
    const refused = probe(argv);
    if (refused.length === 0) break;
    const next = withoutOptions(argv, refused);
    if (next.length === argv.length) break;
    dropped.push(...argv.filter((a) => !next.includes(a)));
    argv = next;
  }
  cached = { argv, dropped };
  if (dropped.length > 0) {
    process.emitWarning(
      `node option(s) ${dropped.join(' ')} apply to the whole process (V8 or per-process options); the ranks run with their effect but start without them in execArgv, which a worker refuses.`,
      { code: 'ASCENT_WORKER_EXEC_ARGV' },
    );
  }
  return argv;
}

/** The options `new Worker` refuses in `argv` ([] when it takes them all). */
function probe(argv: string[]): string[] {
  let w: Worker;
  try {
    w = new Worker('', { eval: true, execArgv: argv, stdout: true, stderr: true });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code !== 'ERR_WORKER_INVALID_EXEC_ARGV') throw err;
    const names = refusedOptions(String((err as Error).message));
    if (!names) {
      throw new Error(
        `Node refuses some of the node options ${argv.join(' ')} for worker threads and did not say which (${(err as Error).message}). HINT: start launch without them, or set them in NODE_OPTIONS.`,
        { cause: err },
      );
    }
    return names;
  }
  w.unref();
  void w.terminate();
  return [];
}
