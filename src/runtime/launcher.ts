/**
 * `launch` core (torchrun-like, ranks are worker threads of this process): every
 * rank runs the entry's `main(ctx)`. The first failure (a thrown error, an uncaught
 * exception, a non-zero exit) is reported with rank, error and stack; the other
 * ranks get a grace period to stop, then are terminated; the exit code is non-zero.
 * A wall-clock limit stops a stuck run with a report of the ranks still running.
 */
import { LaunchOptionsSchema, parseConfig, type LaunchOptions } from './config.js';
import type { AscentError } from './errors.js';
import { resolveModuleUrl } from './module-loader.js';
import { World } from './world.js';

export const EXIT_OK = 0;
export const EXIT_RANK_FAILED = 1;
export const EXIT_USAGE = 2;
/** Like coreutils `timeout`. */
export const EXIT_WALL_CLOCK = 124;

export interface LaunchResult {
  exitCode: number;
  failedRanks: number[];
  /** Ranks still running when the wall-clock limit hit. */
  stuckRanks: number[];
}

const say = (msg: string) => process.stderr.write(`[launch] ${msg}\n`);

/** The rank's own stack when it has one; a main-thread stack would only show Ascent's frames. */
function describeError(err: AscentError | undefined): string {
  if (!err) return '';
  if (err.remoteStack) return `: ${err.stack ?? err.message}`;
  const cause = err.cause instanceof Error ? `: ${err.cause.stack ?? err.cause.message}` : '';
  return cause;
}

export async function launch(options: LaunchOptions): Promise<LaunchResult> {
  const opts = parseConfig(LaunchOptionsSchema, options, 'launch options');
  const entryUrl = resolveModuleUrl(opts.entry, 'entry file');
  const world = await World.create(
    {
      size: opts.nproc,
      env: opts.env,
      gracePeriodMs: opts.gracePeriodMs,
      taskPool: false,
      output: { prefix: opts.prefix, ranks: opts.rank0Only ? [0] : 'all' },
      ...(opts.deviceMemory !== undefined ? { deviceMemory: opts.deviceMemory } : {}),
    },
    { entryUrl, entryArgs: opts.entryArgs },
  );

  const done = new Set<number>();
  const failed: number[] = [];
  // Failures that are consequences of another (a communicator aborted because a
  // peer died or failed) rank after the failures that caused them in the summary.
  const primary: number[] = [];
  let stuck: number[] = [];
  let exitCode = EXIT_OK;
  let finish!: () => void;
  const finished = new Promise<void>((r) => (finish = r));
  let stopping = false;

  const fail = (rank: number, err: AscentError | undefined, how: string) => {
    if (failed.includes(rank)) return;
    // After a signal or the wall-clock limit, aborted collectives are our doing, not failures.
    if (stopping && exitCode !== EXIT_RANK_FAILED && err?.code === 'ASCENT_COMM_ABORTED') return;
    failed.push(rank);
    if (err?.code !== 'ASCENT_COMM_ABORTED') primary.push(rank);
    say(`rank ${rank} ${how}${describeError(err)}`);
    if (!stopping) {
      stopping = true;
      exitCode = EXIT_RANK_FAILED;
      world.abortWorldComm(`rank ${rank} failed: ${err?.message ?? how}`);
      const others = world.ranks.filter((r) => r.rank !== rank && r.status === 'running').length;
      say(`stopping ${others} other rank${others === 1 ? '' : 's'} (grace period ${opts.gracePeriodMs} ms)`);
      finish();
    }
  };

  world.on('main-done', (rank) => {
    done.add(rank);
    if (done.size === opts.nproc) finish();
  });
  world.on('main-failed', (rank, err) => fail(rank, err, 'failed'));
  world.on('rank-exit', (rank, code, err) => {
    // A rank we terminated has no error; one that exited on its own does, even if we
    // only learn of it during the grace period.
    if (done.has(rank) || failed.includes(rank)) return;
    if (!err) {
      if (code !== 0 || stopping) return;
      // main() called process.exit(0): a clean finish, as torchrun counts it.
      done.add(rank);
      if (done.size === opts.nproc) finish();
      return;
    }
    fail(rank, err, err?.cause instanceof Error ? 'crashed' : `exited with code ${code}`);
  });

  let wallTimer: ReturnType<typeof setTimeout> | undefined;
  const maxTimeMs = opts.maxTimeMs;
  if (maxTimeMs !== undefined && maxTimeMs > 0) {
    wallTimer = setTimeout(() => {
      if (stopping) return;
      stopping = true;
      exitCode = EXIT_WALL_CLOCK;
      stuck = world.ranks.filter((r) => r.status === 'running').map((r) => r.rank);
      say(`wall-clock limit of ${maxTimeMs / 1000} s reached; ${stuck.length} rank${stuck.length === 1 ? '' : 's'} still running: [${stuck.join(', ')}]`);
      const now = Date.now();
      for (const r of stuck) {
        const out = world.ranks[r]!.output;
        const last = out?.lastLine !== undefined ? `last output ${((now - out.lastLineAt!) / 1000).toFixed(1)} s ago: ${JSON.stringify(out.lastLine.slice(0, 200))}` : 'no output yet';
        say(`  rank ${r}: ${last}`);
      }
      finish();
    }, maxTimeMs);
  }

  const onSignal = (sig: NodeJS.Signals) => {
    if (stopping) {
      say(`${sig} again: terminating now`);
      process.exit(128 + (sig === 'SIGINT' ? 2 : 15));
    }
    stopping = true;
    exitCode = 128 + (sig === 'SIGINT' ? 2 : 15);
    say(`${sig} received; stopping ${world.ranks.filter((r) => r.status === 'running').length} ranks`);
    finish();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  try {
    await world.runMain().catch((err: AscentError) => fail(err.rank ?? -1, err, 'could not start'));
    await finished;
  } finally {
    clearTimeout(wallTimer);
    await world.shutdown(exitCode === EXIT_OK ? 'all ranks finished' : 'launch is stopping the world');
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  if (exitCode === EXIT_RANK_FAILED) {
    const root = primary[0] ?? failed[0];
    say(`FAILED: ${failed.length} of ${opts.nproc} ranks failed (first: rank ${root}); exit code ${exitCode}`);
  }
  return { exitCode, failedRanks: failed, stuckRanks: stuck };
}
