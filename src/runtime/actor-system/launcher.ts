/**
 * `launch` core (torchrun-like, ranks are worker threads of this process): every
 * rank runs the entry's `main(ctx)`. On the first failure (a thrown error, an
 * uncaught exception, a non-zero exit) the other ranks get a grace period to run
 * their catch / finally and stop hooks, then are terminated. Then one report:
 * the ranks' errors grouped (an error all ranks raised is printed once, "on all N
 * ranks"), ranks that hung, and the culprit (launch-report.ts). A run that failed
 * only on bad input (a ConfigError) is one line per distinct error, no stack, and
 * exit code 2. A wall-clock limit stops a stuck run with a report of the ranks
 * still running.
 *
 * Under mpirun (`mpirun -np P ascent launch --nproc-per-node N entry.ts`) each
 * process runs N of the P x N ranks (mpi-job.ts): a failure here is told to every
 * other process, and another process's failure stops this one's ranks at once;
 * ranks reach the actors of other processes' ranks through each process's actor
 * gateway (actor-gateway.ts), whose addresses go round over MPI at start.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { LaunchOptionsSchema, parseConfig, type LaunchOptions } from '../config.js';
import { envInt, validateEnv } from '../env.js';
import { InvalidArgumentError, type AscentError } from '../errors.js';
import {
  describeRanks,
  groupFailures,
  isCollectiveError,
  isFailure,
  isUsageFailure,
  pickCulprit,
  type RankEnd,
  type RankErrorInfo,
  type RankOutcome,
} from './launch-report.js';
import { ActorGateway } from './actor-gateway.js';
import { importModule, resolveModuleUrl } from './module-loader.js';
import { culpritTag, describeProcess, detectMpiJob, MpiSession, taggedCulprits } from './mpi-job.js';
import { World } from './world.js';

export const EXIT_OK = 0;
export const EXIT_RANK_FAILED = 1;
export const EXIT_USAGE = 2;
/** Like coreutils `timeout`. */
export const EXIT_WALL_CLOCK = 124;

/** After mpirun's signal: the report is out by then (Open MPI's SIGKILL follows the signal after 1 s by default). */
const TEARDOWN_REPORT_MS = 700;
/**
 * After mpirun's signal: how long the end of a dead peer's actor connection may lag behind it.
 * A SIGKILLed launch process's connections close only once the kernel has torn the process down:
 * 28-178 ms after the signal at load 11 here (longer while its ranks compute), past 200 ms in a
 * loaded test run. The report still goes out at TEARDOWN_REPORT_MS, before mpirun's SIGKILL.
 */
const PEER_DEATH_WAIT_MS = 500;

export interface LaunchResult {
  exitCode: number;
  failedRanks: number[];
  /** Ranks still running when the wall-clock limit hit. */
  stuckRanks: number[];
  /** Ranks that did not stop within the grace period and were terminated. */
  hungRanks: number[];
  /** The ranks most likely at fault when the run failed. */
  culpritRanks: number[];
}

let sayPrefix = '[launch]';
const say = (msg: string) => process.stderr.write(`${sayPrefix} ${msg}\n`);

/** The rank's own stack when it has one; a main-thread stack would only show Ascent's frames. */
function errorText(err: RankErrorInfo | undefined, withStack: boolean): string {
  if (!err) return '';
  return `: ${withStack && err.stack ? err.stack : `${err.name}: ${err.message}`}`;
}

function errorInfo(err: AscentError | undefined): RankErrorInfo | undefined {
  if (!err) return undefined;
  // A crash keeps the worker's own error as the cause; its stack is the useful one.
  const cause = !err.remoteStack && err.cause instanceof Error ? err.cause : undefined;
  const shown = cause ?? err;
  // An error made here (a non-zero exit) has only the launcher's frames: no stack then.
  const stack = err.remoteStack || cause ? withoutRuntimeFrames(shown.stack) : undefined;
  return {
    name: shown.name,
    code: err.code,
    message: shown.message,
    ...(stack ? { stack } : {}),
    ...(err.details ? { details: err.details } : {}),
  };
}

/** Drops the rank worker's own frames (how main was called), which say nothing about the error. */
function withoutRuntimeFrames(stack: string | undefined): string | undefined {
  return stack
    ?.split('\n')
    .filter((l) => !/^\s+at .*[/\\]runtime[/\\]actor-system[/\\]rank-worker\.js:/.test(l))
    .join('\n');
}

/**
 * The launcher owns the terminal: when stderr is a real one, rank 0's stderr is
 * forwarded raw and looks like a TTY to it, so its progress display renders live;
 * otherwise (CI, a pipe, a file) every rank prints plain prefixed lines.
 */
function liveTerminal(): { terminal?: { ranks: number[]; columns: number } } {
  const err = process.stderr;
  if (!err.isTTY) return {};
  return { terminal: { ranks: [0], columns: err.columns || 80 } };
}

/** The preflight's verdict: run the ranks, refuse the args (a usage message), or answer them without any rank. */
type Preflight = { run: true } | { usage: string } | { stdout: string };

/**
 * An entry may export `validateArgs({ args, worldSize, localWorldSize })` (localWorldSize:
 * the ranks each process runs, the world size unless the run spans processes): launch calls it once, in the
 * launcher process, before any rank starts, so bad flags are one line and exit 2 at once
 * instead of after N ranks have loaded, and `--help` is answered without starting N ranks
 * (it resolves to `{ stdout }`). Only entries whose source names `validateArgs` are
 * imported here (others' top-level code runs on the ranks only, as before).
 */
async function preflight(entryUrl: string, args: string[], worldSize: number, localWorldSize: number): Promise<Preflight> {
  let source: string;
  try {
    source = readFileSync(fileURLToPath(entryUrl), 'utf8');
  } catch {
    return { run: true }; // the ranks report an unreadable entry themselves
  }
  if (!/\bvalidateArgs\b/.test(source)) return { run: true };
  const mod = await importModule(entryUrl);
  const validate = mod.validateArgs;
  if (typeof validate !== 'function') return { run: true };
  let out: unknown;
  try {
    out = await (validate as (a: { args: string[]; worldSize: number; localWorldSize: number }) => unknown)({ args: [...args], worldSize, localWorldSize });
  } catch (err) {
    // By code, not instanceof: the entry may hold its own copy of Ascent's error classes.
    const code = (err as { code?: unknown } | null)?.code;
    if (code === 'ASCENT_CONFIG' || code === 'ASCENT_INVALID_ARGUMENT') return { usage: (err as Error).message };
    throw err;
  }
  if (out === undefined || out === null) return { run: true };
  const text = (out as { stdout?: unknown }).stdout;
  if (typeof out !== 'object' || typeof text !== 'string') {
    throw new InvalidArgumentError(
      `validateArgs() of ${fileURLToPath(entryUrl)} resolved to ${JSON.stringify(out)}. HINT: resolve to nothing to start the ranks, or to { stdout: string } to print that text instead (e.g. for --help).`,
    );
  }
  return { stdout: text };
}

/**
 * The world communicator of a process counts its ranks from 0: in a run that spans
 * processes, the culprits its errors name become global ranks here (errors of the
 * leg between processes, which carry `culpritProcesses`, name global ranks already).
 */
function globalCulprits(info: RankErrorInfo | undefined, rankOffset: number): RankErrorInfo | undefined {
  const named = info?.details?.culpritWorldRanks;
  // Aborted by another process's notice: the communicator could not name ranks of that process, the notice's tag does.
  const tagged = info ? taggedCulprits(info.message) : [];
  if (info && tagged.length > 0 && (!Array.isArray(named) || named.length === 0)) return { ...info, details: { ...info.details, culpritWorldRanks: tagged } };
  if (!info || rankOffset === 0 || !Array.isArray(named) || info.details?.culpritProcesses !== undefined) return info;
  return { ...info, details: { ...info.details, culpritWorldRanks: (named as number[]).map((r) => r + rankOffset) } };
}

export async function launch(options: LaunchOptions): Promise<LaunchResult> {
  const opts = parseConfig(LaunchOptionsSchema, options, 'launch options');
  // Bad environment values fail before the entry is imported or any rank starts (World.create checks again for World users).
  validateEnv({ ...process.env, ...opts.env });
  const entryUrl = resolveModuleUrl(opts.entry, 'entry file');
  const job = detectMpiJob();
  const spans = job !== null && job.nnodes > 1;
  sayPrefix = spans ? `[launch ${describeProcess(job.nodeRank, opts.nproc)}]` : '[launch]';
  const verdict = await preflight(entryUrl, opts.entryArgs, spans ? opts.nproc * job.nnodes : opts.nproc, opts.nproc);
  if ('usage' in verdict) {
    process.stderr.write(`launch: ${verdict.usage} (checked before starting the ranks)\n`);
    return { exitCode: EXIT_USAGE, failedRanks: [], stuckRanks: [], hungRanks: [], culpritRanks: [] };
  }
  if ('stdout' in verdict) {
    // Printed once per job (by process 0 under mpirun), as the entry wrote it: no rank said it.
    if (!spans || job.nodeRank === 0) process.stdout.write(verdict.stdout.endsWith('\n') || verdict.stdout === '' ? verdict.stdout : `${verdict.stdout}\n`);
    return { exitCode: EXIT_OK, failedRanks: [], stuckRanks: [], hungRanks: [], culpritRanks: [] };
  }
  // A run that spans processes needs MPI before any rank starts (a single-process run never loads it).
  const connectMs = (envInt('HCCL_CONNECT_TIMEOUT') ?? 120) * 1000;
  const session = spans ? await MpiSession.start(job, connectMs) : undefined;
  // Actors across processes: each process's main thread listens; the addresses go round over MPI.
  const gateway = session
    ? await ActorGateway.open({
        nodeRank: session.job.nodeRank,
        ranksPerProcess: opts.nproc,
        sameHost: session.job.localSize === session.job.nnodes,
        exchange: (address) => session.exchange(address, connectMs),
      })
    : undefined;
  const world = await World.create(
    {
      size: opts.nproc,
      env: opts.env,
      gracePeriodMs: opts.gracePeriodMs,
      taskPool: false,
      output: { prefix: opts.prefix, ranks: opts.rank0Only ? [0] : 'all', ...(opts.logDir ? { logDir: opts.logDir } : {}), ...liveTerminal() },
      ...(opts.deviceMemory !== undefined ? { deviceMemory: opts.deviceMemory } : {}),
    },
    {
      entryUrl,
      entryArgs: opts.entryArgs,
      ...(session ? { layout: { nodeRank: session.job.nodeRank, nnodes: session.job.nnodes } } : {}),
      ...(gateway ? { gateway } : {}),
    },
  ).catch((err: unknown) => {
    // The ranks never ran: nobody will reach this process's actors.
    gateway?.close();
    throw err;
  });
  const worldSize = world.worldSize;
  // Set once another process told us it failed: our ranks' failures are then its consequence.
  let peerAborted = false;
  let toldPeers = false;
  const tellPeers = (reason: string, culprits: readonly number[] = []) => {
    if (!session || peerAborted || toldPeers) return;
    toldPeers = true;
    void session.abortJob(`${culpritTag(culprits)}${describeProcess(session.job.nodeRank, opts.nproc)}: ${reason}`);
  };

  const outcomes = new Map<number, RankOutcome>();
  let arrivals = 0;
  let stuck: number[] = [];
  let exitCode = EXIT_OK;
  let finish!: () => void;
  const finished = new Promise<void>((r) => (finish = r));
  let stopping = false;
  const doneCount = () => [...outcomes.values()].filter((o) => o.end === 'done' || (o.end === 'exited' && !isFailure(o))).length;

  const fail = (rank: number, err: AscentError | undefined, end: RankEnd, exitCode_?: number) => {
    if (outcomes.has(rank)) return;
    // After a signal or the wall-clock limit, aborted collectives are our doing, not failures.
    if (stopping && exitCode !== EXIT_RANK_FAILED && err?.code === 'ASCENT_COMM_ABORTED') return;
    const info = globalCulprits(errorInfo(err), world.rankOffset);
    outcomes.set(rank, { rank, end, order: arrivals++, ...(info ? { error: info } : {}), ...(exitCode_ !== undefined ? { exitCode: exitCode_ } : {}) });
    if (!stopping) {
      stopping = true;
      exitCode = EXIT_RANK_FAILED;
      // A collective error names its own culprits; any other failure makes this rank the culprit.
      const named = info?.details?.culpritWorldRanks;
      const culprits = isCollectiveError(info) ? (Array.isArray(named) ? (named as number[]) : []) : [rank];
      world.abortWorldComm(`rank ${rank} failed: ${err?.message ?? end}`, culprits);
      tellPeers(`rank ${rank} failed: ${err?.message ?? end}`, culprits);
      const others = world.ranks.filter((r) => r.rank !== rank && r.status === 'running').length;
      // A usage error is reported as one line at the end; a progress line would only add noise.
      if (others > 0 && err?.code !== 'ASCENT_CONFIG')
        say(
          `stopping ${others} other rank${others === 1 ? '' : 's'} (grace period ${opts.gracePeriodMs} ms) after a failure on rank ${rank}; the report follows`,
        );
      finish();
    }
  };

  // Said at once: if mpirun's SIGKILL cuts the report short, the output still names the process that died first.
  gateway?.onProcessGone((_process, reason) => say(reason));

  session?.onPeerAbort((reason) => {
    if (peerAborted) return;
    peerAborted = true;
    say(`stopping this process's ranks: ${reason}`);
    // Ranks in a collective fail at once naming the cause; the others are stopped as after a failure here.
    world.abortWorldComm(reason, taggedCulprits(reason));
    if (!stopping) {
      stopping = true;
      exitCode = EXIT_RANK_FAILED;
      finish();
    }
  });

  world.on('main-done', (rank) => {
    if (outcomes.has(rank)) return;
    outcomes.set(rank, { rank, end: 'done' });
    if (doneCount() === opts.nproc) finish();
  });
  world.on('main-failed', (rank, err) => fail(rank, err, 'failed'));
  world.on('rank-exit', (rank, code, err) => {
    // A rank we terminated has no error; one that exited on its own does, even if we
    // only learn of it during the grace period.
    if (outcomes.has(rank)) return;
    if (!err) {
      if (code !== 0 || world.ranks.find((r) => r.rank === rank)?.terminated) return;
      // main() called process.exit(0): a clean finish, as torchrun counts it (but a
      // suspect if the others then fail waiting for it).
      outcomes.set(rank, { rank, end: 'exited', exitCode: 0 });
      if (doneCount() === opts.nproc) finish();
      return;
    }
    fail(rank, err, err.cause instanceof Error ? 'crashed' : 'exited', code);
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
        const out = world.ranks.find((x) => x.rank === r)!.output;
        const last =
          out?.lastLine !== undefined
            ? `last output ${((now - out.lastLineAt!) / 1000).toFixed(1)} s ago: ${JSON.stringify(out.lastLine.slice(0, 200))}`
            : 'no output yet';
        say(`  rank ${r}: ${last}`);
      }
      finish();
    }, maxTimeMs);
  }

  // Under mpirun a signal is mpirun tearing the job down (another process ended, or mpirun itself
  // was stopped), and Open MPI follows it with SIGKILL after odls_base_sigkill_timeout (1 s by
  // default): the report is printed by then, even if some ranks are still stopping.
  let signalled = false;
  let reportNow!: () => void;
  const reportDue = new Promise<void>((r) => (reportNow = r));
  let reportTimer: ReturnType<typeof setTimeout> | undefined;
  // A process of the job found dead after mpirun's signal: the cause of this process's stop.
  let goneCause: string | undefined;

  const stopBySignal = (sig: NodeJS.Signals) => {
    stopping = true;
    exitCode = 128 + (sig === 'SIGINT' ? 2 : 15);
    const why = session ? ' (under mpirun this usually means another process of the job ended; mpirun names it)' : '';
    say(`${sig} received${why}; stopping ${world.ranks.filter((r) => r.status === 'running').length} ranks`);
    tellPeers(`stopped by ${sig}`);
    finish();
  };

  const onMpirunSignal = async (sig: NodeJS.Signals) => {
    reportTimer = setTimeout(reportNow, TEARDOWN_REPORT_MS);
    // A failure here or another process's notice already stopped the ranks: its report follows.
    if (stopping) return;
    // A peer's death reaches this process through the end of its actor connection, which may
    // come just after mpirun's signal for that same death: wait a moment for it (bounded).
    const gone = await gateway?.firstGoneProcess(PEER_DEATH_WAIT_MS);
    if (stopping) return; // a rank failed meanwhile: its error names the cause
    if (!gone) return stopBySignal(sig);
    stopping = true;
    exitCode = EXIT_RANK_FAILED;
    goneCause = gone.reason;
    const ranks = Array.from({ length: opts.nproc }, (_, i) => gone.process * opts.nproc + i);
    say(`${sig} received: mpirun is stopping the job after a process died (${gone.reason}); stopping this process's ranks, the report follows`);
    // Ranks waiting on the dead process fail now naming it (their actor calls already did).
    world.abortWorldComm(gone.reason, ranks);
    tellPeers(gone.reason, ranks);
    finish();
  };

  const onSignal = (sig: NodeJS.Signals) => {
    if (session) {
      // mpirun's SIGKILL ends it all soon anyway: a second signal (the test's, a user's) changes nothing.
      if (!signalled) void onMpirunSignal(sig);
      signalled = true;
      return;
    }
    // A signal while stopping (a second Ctrl-C) is the user's "now".
    if (stopping) {
      say(`${sig} again: terminating now`);
      process.exit(128 + (sig === 'SIGINT' ? 2 : 15));
    }
    signalled = true;
    stopBySignal(sig);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  try {
    await world.runMain().catch((err: AscentError) => fail(err.rank ?? -1, err, 'failed'));
    await finished;
  } finally {
    clearTimeout(wallTimer);
  }
  const down = world.shutdown(exitCode === EXIT_OK ? 'all ranks finished' : 'launch is stopping the world');
  // After mpirun's signal the report goes out before its SIGKILL; the ranks keep stopping meanwhile.
  await Promise.race([down, reportDue]);
  clearTimeout(reportTimer);

  const hung = world.ranks.filter((r) => r.hung).map((r) => r.rank);
  for (const r of hung) {
    if (!outcomes.has(r)) outcomes.set(r, { rank: r, end: 'hung' });
  }
  for (const r of world.ranks) {
    if (!outcomes.has(r.rank)) outcomes.set(r.rank, { rank: r.rank, end: 'stopped' });
  }
  const all = [...outcomes.values()];
  const failed = all
    .filter(isFailure)
    .map((o) => o.rank)
    .sort((a, b) => a - b);
  let culpritRanks: number[] = [];
  let culprit: ReturnType<typeof pickCulprit>;
  if (exitCode === EXIT_RANK_FAILED && isUsageFailure(all)) {
    exitCode = EXIT_USAGE;
    // Bad input: the message says what was wrong and what to do; frames would only hide it.
    for (const g of groupFailures(all).filter((x) => !isCollectiveError(x.error))) {
      process.stderr.write(`launch: ${g.error?.message ?? 'invalid input'} (on ${describeRanks(g.ranks, worldSize)})\n`);
    }
  } else if (exitCode === EXIT_RANK_FAILED) {
    culprit = pickCulprit(all);
    culpritRanks = culprit?.ranks ?? [];
    for (const g of groupFailures(all, culpritRanks)) {
      // Aborted collectives are consequences: their message names the cause; frames add nothing.
      const withStack = g.error?.code !== 'ASCENT_COMM_ABORTED';
      const same = g.identical ? 'the same error' : `a ${g.error?.name ?? 'similar error'}`;
      const who =
        g.ranks.length > 1
          ? `${describeRanks(g.ranks, worldSize)} ${g.how} with ${same} (as on rank ${g.shownRank})`
          : `${describeRanks(g.ranks, worldSize)} ${g.how}`;
      say(`${who}${errorText(g.error, withStack)}`);
    }
  }
  if (exitCode !== EXIT_USAGE) {
    for (const r of hung) say(`rank ${r} hung: it did not stop within the grace period of ${opts.gracePeriodMs} ms and was terminated`);
  }
  if (exitCode === EXIT_RANK_FAILED) {
    const blame = culprit ? ` (culprit: ${describeRanks(culprit.ranks, worldSize)}, ${culprit.reason})` : '';
    const of = session ? ' of this process' : '';
    if (goneCause !== undefined && failed.length === 0)
      say(`FAILED: ${goneCause} (then mpirun stopped the job); this process's ranks were stopped; exit code ${exitCode}`);
    else if (peerAborted && failed.length === 0)
      say(`FAILED: another process of the job failed (see above); this process's ranks were stopped; exit code ${exitCode}`);
    else
      say(
        `FAILED: ${failed.length === opts.nproc ? `all ${opts.nproc}` : `${failed.length} of ${opts.nproc}`} ranks${of} failed${blame}; exit code ${exitCode}`,
      );
  }
  await down;
  gateway?.close();
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  if (session) {
    if (exitCode === EXIT_OK) {
      // Every process finished: MPI_Finalize (bounded: a peer that died now must not hang us).
      if (!(await session.finalize(30_000))) say('MPI_Finalize did not finish within 30 s; exiting without it');
    } else {
      tellPeers(`exited with code ${exitCode}`);
      // mpirun stops every process once one exits non-zero: give the others (told above)
      // time to stop their ranks and print their reports first.
      // (After mpirun's own signal every process is being stopped already: no wait.)
      if (toldPeers && !signalled) await new Promise((r) => setTimeout(r, opts.gracePeriodMs + 1000));
    }
  }
  return { exitCode, failedRanks: failed, stuckRanks: stuck, hungRanks: hung, culpritRanks };
}
