/**
 * `npm run bench -- collectives [--ranks N] [--op OP] [--dtype T] [--redop R] [--min-bytes B] [--max-bytes B]`
 *
 * nccl-tests output (same header lines, columns and footer; bench/nccl-format.ts) for
 * every op from 1 KiB to 256 MiB (x4 steps) on N in-process ranks, out of place and in
 * place, beside a STREAM-like copy bandwidth measured in the same run with as many
 * threads as cores. Ops are enqueued back to back and waited for once (as nccl-tests
 * does); time is the p50 of the per-op cycle: when the slowest rank finished op i minus
 * when it finished op i-1, from the native flight recorder's clock. Then algbw = size /
 * time, busbw = algbw x the nccl-tests factor, #wrong = elements differing from the
 * exact expected value (checked on a separate run after the timed ones).
 *
 * efficiency = (bytes the op must move through memory) / time / streamCopyGBs, with the
 * traffic model per op (N = size in bytes, P = ranks; a copy counts read + write):
 *   allReduce      2·P·N     every rank reads all P inputs once (reduce-scatter phase) and
 *                            reads + writes the gathered result (all-gather phase)
 *   allGather      2·P·N     every rank reads N (all chunks) and writes N
 *   reduceScatter  (P+1)·N   every rank reads its chunk from P inputs (P·N/P each) and writes N/P
 *   broadcast      2·(P-1)·N every non-root reads N and writes N
 *   allToAll       2·P·N     every rank reads N from its peers and writes N
 * streamCopyGBs itself counts read + write bytes, as STREAM's Copy does.
 *
 * Where a cycle goes (measurement detail, not part of efficiency): arriveUs = p50 of
 * (the last rank picks up op i) - (op i-1 done), the ranks' hand-over from one op to the
 * next; moveUs = p50 of (op i done) - (the last rank picks it up), the data movement.
 *
 * wall/op(us) = host wall-clock time per timed op on the slowest rank, from enqueuing the
 * first to the host seeing the last complete (--completions says how they are waited for):
 * the caller's view, its wake-ups included, where time is the stream's per-op cycle.
 *
 * cpu(us) = CPU microseconds of the whole process per timed op (every rank's JS and stream
 * threads, from getrusage over rank 0's timed window): on this shared 2-core machine the
 * wall-clock rows move with the load average, the CPU an op costs far less; cpu / cores is
 * the time the op would approach with the cores to itself.
 *
 * eff(near) = the efficiency against a STREAM-like copy measured just before the row, for the
 * memory-bound rows (traffic >= 256 MiB): the load moves within a run, and the gap between
 * efficiency and eff(near) shows by how much (the target keeps the run's baseline).
 *
 * target = the speed targets of the collectives (TARGETS): measured / target as a ratio
 * where >= 1 means the target holds, on the rows a target names.
 *
 * native floor = the same allReduce (fp32 sum, up to 64 KiB) on as many plain threads running the
 * native collective with no JS and no stream threads (native/bench/comm_floor.cc), measured in the
 * same run: what the ranks' synchronization itself costs, beside what the rows above add to it
 * (the JS <-> stream-thread hand-offs). sleeps/op = voluntary context switches of all its ranks.
 *
 * Then, with --processes P (default 2; 0 skips), the same ranks as P processes under
 * mpirun (allReduce fp32 sum up to 16 MiB, each op awaited) beside Open MPI's own
 * MPI_Allreduce on as many processes, measured in the same run (bench/collectives-mpi.ts);
 * skipped with the reason printed where mpirun, mpicc or the MPI addon is missing.
 */
import { availableParallelism, hostname, loadavg } from 'node:os';
import { Command, Option } from 'commander';
import { World, loadNative, type DType, type ReduceOp } from '../src/internal.js';
import { counts, type BenchOp, type CollectivesBench, type Completions } from './collectives-actor.js';
import { runSpanRows, spanSkipReason, type SpanRow } from './collectives-mpi.js';
import { BenchUsageError } from './args.js';
import { NCCL_TYPE_NAME, ncclFooterLines, ncclHeaderLines, ncclRedopRoot, ncclRow, type NcclResult } from './nccl-format.js';
import { percentile, round, writeResults } from './stats.js';
import { formatTable } from './table.js';

const OPS: BenchOp[] = ['allReduce', 'allGather', 'reduceScatter', 'broadcast', 'allToAll'];

export function trafficBytes(op: BenchOp, n: number, p: number): number {
  switch (op) {
    case 'allReduce':
    case 'allGather':
    case 'allToAll':
      return 2 * p * n;
    case 'reduceScatter':
      return (p + 1) * n;
    case 'broadcast':
      return 2 * (p - 1) * n;
  }
}

export function busFactor(op: BenchOp, p: number): number {
  switch (op) {
    case 'allReduce':
      return (2 * (p - 1)) / p;
    case 'broadcast':
      return 1;
    default:
      return (p - 1) / p;
  }
}

export interface CollRow {
  op: BenchOp;
  /** nccl-tests' in-place variant (send and recv share one buffer). */
  inPlace: boolean;
  dtype: DType;
  /** As nccl-tests prints it: the reduce op, or `none`. */
  redop: string;
  /** As nccl-tests prints it: the root, or -1. */
  root: number;
  ranks: number;
  bytes: number;
  count: number;
  iters: number;
  timeUs: number;
  algbwGBs: number;
  busbwGBs: number;
  wrong: number;
  efficiency: number;
  arriveUs: number;
  moveUs: number;
  /** CPU microseconds of the whole process per timed op (see the file comment). */
  cpuUsPerOp: number;
  /**
   * Host wall-clock microseconds per timed op on the slowest rank, from enqueuing the first to
   * seeing the last complete: the caller's view, host wake-ups included (time is the stream's).
   */
  wallUsPerOp: number;
  /** Memory-bound rows: the STREAM-like copy measured just before the row, and the efficiency against it. */
  copyNearGBs?: number;
  efficiencyNear?: number;
  /** The target this row is checked against, when one names it. */
  target?: TargetCheck;
}

/** A speed target of one row: a p50 time at most `maxTimeUs`, or an efficiency of at least `minEfficiency`. */
export interface Target {
  op: BenchOp;
  ranks: number;
  bytes: number;
  maxTimeUs?: number;
  minEfficiency?: number;
}

export interface TargetCheck {
  /** "p50 <= 110 us" / "efficiency >= 0.8" */
  label: string;
  /** Target over measured time, or measured over target efficiency: >= 1 means the target holds. */
  ratio: number;
  holds: boolean;
}

/** The collectives' speed targets: small allReduce latency, large allReduce against the run's STREAM-like copy. */
export const TARGETS: readonly Target[] = [
  { op: 'allReduce', ranks: 16, bytes: 4096, maxTimeUs: 110 },
  { op: 'allReduce', ranks: 16, bytes: 64 * 1024 * 1024, minEfficiency: 0.8 },
];

export function checkTarget(
  row: Pick<CollRow, 'op' | 'ranks' | 'bytes' | 'timeUs' | 'efficiency'>,
  targets: readonly Target[] = TARGETS,
): TargetCheck | undefined {
  const t = targets.find((x) => x.op === row.op && x.ranks === row.ranks && x.bytes === row.bytes);
  if (!t) return undefined;
  const [label, ratio] =
    t.maxTimeUs !== undefined
      ? [`p50 <= ${t.maxTimeUs} us`, t.maxTimeUs / row.timeUs]
      : [`efficiency >= ${t.minEfficiency}`, row.efficiency / t.minEfficiency!];
  return { label, ratio: round(ratio, 3), holds: ratio >= 1 };
}

export const USAGE = `Usage: npm run bench -- collectives [flags]

nccl-tests output (columns size count type redop root, then time algbw busbw #wrong out of
place and in place) for every op on N in-process ranks, beside a STREAM-like copy measured in
the same run; then a table with the efficiency, the CPU per op and, on the rows the speed
targets name (16 ranks: allReduce 4 KiB p50 <= 110 us, 64 MiB efficiency >= 0.8), the
measured / target ratio (>= 1 holds).
Results: bench/results/collectives-<date>.json (and collectives-latest.json).

Flags:
  --ranks <n>        ranks (default 16)
  --op <op>          one op: ${OPS.join(', ')} (default: all)
  --dtype <t>        fp32, bf16, fp16, int32, int64 (default fp32)
  --redop <r>        sum, prod, max, min, avg (default sum)
  --min-bytes <b>    smallest size in bytes (default 1024)
  --max-bytes <b>    largest size in bytes (default 268435456)
  --step <k>         size multiplier between rows (default 4)
  --processes <p>    also run allReduce on p processes x ranks/p under mpirun, beside Open MPI's
                     MPI_Allreduce on as many processes (default 2; 0 skips)
  --completions <c>  each (default): the timed ops are enqueued back to back and every op's
                     promise is awaited together (Promise.all); the stream posts their
                     completions in runs, not one host wake-up per op; awaited: each op is
                     awaited before the next is enqueued (await comm.allReduce() in a loop:
                     a host round trip per op); none (with --op allReduce): enqueued without a
                     completion and the stream synchronized once, as NCCL ops are
  -h, --help         print this help and exit
`;

function parse(argv: string[]) {
  const prog = new Command('bench collectives')
    .addOption(new Option('--ranks <n>', 'ranks').default('16'))
    .addOption(new Option('--op <op>', 'one op').choices(OPS))
    .addOption(new Option('--dtype <t>', 'dtype').choices(['fp32', 'bf16', 'fp16', 'int32', 'int64']).default('fp32'))
    .addOption(new Option('--redop <r>', 'reduce op').choices(['sum', 'prod', 'max', 'min', 'avg']).default('sum'))
    .addOption(new Option('--min-bytes <b>', 'smallest size').default(String(1024)))
    .addOption(new Option('--max-bytes <b>', 'largest size').default(String(256 * 1024 * 1024)))
    .addOption(new Option('--step <k>', 'size multiplier between rows').default('4'))
    .addOption(new Option('--processes <p>', 'processes of the mpirun rows').default('2'))
    .addOption(new Option('--completions <c>', 'host completions of the timed ops').choices(['each', 'awaited', 'none']).default('each'))
    .exitOverride()
    .configureOutput({ writeErr: () => undefined, writeOut: () => undefined });
  prog.parse(argv, { from: 'user' });
  const o = prog.opts();
  const int = (name: string, v: string, min: number) => {
    if (!/^\d+$/.test(v) || Number(v) < min) throw new BenchUsageError(`Expected an integer >= ${min} for --${name} but received ${JSON.stringify(v)}`);
    return Number(v);
  };
  const opts = {
    ranks: int('ranks', o.ranks, 1),
    ops: o.op ? [o.op as BenchOp] : OPS,
    dtype: o.dtype as DType,
    redop: o.redop as ReduceOp,
    minBytes: int('min-bytes', o.minBytes, 1),
    maxBytes: int('max-bytes', o.maxBytes, 1),
    step: int('step', o.step, 2),
    processes: int('processes', o.processes, 0),
    completions: o.completions as Completions,
  };
  if (opts.completions === 'none' && (opts.ops.length !== 1 || opts.ops[0] !== 'allReduce')) {
    throw new BenchUsageError('--completions none runs allReduce only; add --op allReduce.');
  }
  if (opts.processes > 0 && opts.ranks % opts.processes !== 0) {
    throw new BenchUsageError(`--ranks ${opts.ranks} is not a multiple of --processes ${opts.processes}; give ranks that split evenly, or --processes 0.`);
  }
  if (opts.minBytes > opts.maxBytes)
    throw new BenchUsageError(`--min-bytes ${opts.minBytes} is larger than --max-bytes ${opts.maxBytes}; give a smallest size <= the largest.`);
  return opts;
}

/** How the timed ops of a row are issued and waited for (the target column names it: a p50 holds for that usage only). */
export const COMPLETIONS_MODE: Readonly<Record<Completions, string>> = {
  each: 'enqueued back to back, every promise awaited together',
  awaited: 'each op awaited before the next',
  none: 'no completions, one synchronize',
};

const WARMUP = 10;
/** Rows moving at least this much (traffic model above) also get the copy measured beside them. */
const NEAR_COPY_TRAFFIC = 256 * 1024 * 1024;
/** The mpirun rows stop here: each op is awaited, with host copies on the leg between processes. */
const SPAN_MAX_BYTES = 16 * 1024 * 1024;
const SPAN_ITERS = 20;

/** The native floor of one allReduce size (see the file comment). */
export interface FloorRow {
  bytes: number;
  iters: number;
  timeUs: number;
  p10Us: number;
  p90Us: number;
  cpuUsPerOp: number;
  sleepsPerOp: number;
}

/** Largest result the floor measures: the one-barrier algorithm's limit (native kSmallBytes). */
const FLOOR_MAX_BYTES = 64 * 1024;
const FLOOR_ITERS = 2000;

/** Why the floor is not measured for these options, or undefined when it is. */
function floorSkipReason(opts: ReturnType<typeof parse>, sizes: number[]): string | undefined {
  if (!opts.ops.includes('allReduce')) return '--op excludes allReduce';
  if (opts.dtype !== 'fp32' || opts.redop !== 'sum') return 'it runs fp32 sum only';
  if (!sizes.some((b) => b <= FLOOR_MAX_BYTES)) return `no size up to ${FLOOR_MAX_BYTES} B`;
  return undefined;
}

/** The native floor rows (fp32 sum allReduce only), or the printed reason they were skipped. */
function floorRows(opts: ReturnType<typeof parse>, sizes: number[], print: (line: string) => void): FloorRow[] {
  const reason = floorSkipReason(opts, sizes);
  if (reason) {
    print(`# native floor skipped: ${reason}`);
    return [];
  }
  const rows: FloorRow[] = [];
  for (const bytes of sizes.filter((b) => b <= FLOOR_MAX_BYTES && b % 4 === 0)) {
    const f = loadNative().commFloorBench(opts.ranks, bytes, FLOOR_ITERS);
    const row = {
      bytes,
      iters: FLOOR_ITERS,
      timeUs: round(f.p50Us, 1),
      p10Us: round(f.p10Us, 1),
      p90Us: round(f.p90Us, 1),
      cpuUsPerOp: round(f.cpuUsPerOp, 1),
      sleepsPerOp: round(f.sleepsPerOp, 2),
    };
    rows.push(row);
    print(
      `# native floor, allReduce ${bytes} B on ${opts.ranks} threads (no JS, no stream threads): p50 ${row.timeUs} us (p10 ${row.p10Us}, p90 ${row.p90Us}), cpu ${row.cpuUsPerOp} us/op, ${row.sleepsPerOp} sleeps/op`,
    );
  }
  return rows;
}

/** The rows on several processes, or the printed reason they were skipped. */
async function processRows(opts: ReturnType<typeof parse>, sizes: number[], print: (line: string) => void): Promise<{ rows: SpanRow[]; skipped?: string }> {
  const reason = !opts.ops.includes('allReduce') ? 'they run allReduce only (--op excludes it)' : spanSkipReason();
  if (reason) {
    print(`# ${opts.processes}-process rows skipped: ${reason}`);
    return { rows: [], skipped: reason };
  }
  const n = opts.ranks / opts.processes;
  const spanSizes = sizes.filter((b) => b <= SPAN_MAX_BYTES);
  print(
    `# ${opts.processes} processes x ${n} ranks under mpirun: allReduce fp32 sum, each op awaited; mpi = Open MPI's MPI_Allreduce on ${opts.ranks} processes, same run`,
  );
  const rows = await runSpanRows({ processes: opts.processes, ranksPerProcess: n, sizes: spanSizes, iters: SPAN_ITERS });
  print(
    formatTable(
      rows.map((r) => ({
        'size(B)': r.bytes,
        'time(us)': r.timeUs,
        'busbw(GB/s)': r.busbwGBs,
        '#wrong': r.wrong,
        'mpi time(us)': r.mpiTimeUs,
        'mpi busbw(GB/s)': r.mpiBusbwGBs,
        'mpi #wrong': r.mpiWrong,
        'ascent/mpi': r.vsMpi,
      })),
    ),
  );
  return { rows };
}

export async function runCollectivesBench(argv: string[], print: (line: string) => void = (l) => console.log(l)) {
  const opts = parse(argv);
  const p = opts.ranks;
  const world = await World.create({ size: p, taskPool: false });
  try {
    const mesh = await world.spawn<CollectivesBench>({ module: new URL('./collectives-actor.js', import.meta.url), export: 'CollectivesBench' });
    // STREAM-like copy on as many ranks (threads) as cores. Each repetition starts the
    // copies on all of them at once and counts the slowest: copies that did not overlap
    // in time would add up single-thread bandwidths and overstate the machine.
    const cores = Math.min(availableParallelism(), p);
    const copyBytes = 256 * 1024 * 1024;
    const copiers = Array.from({ length: cores }, (_, r) => r);
    await Promise.all(copiers.map((r) => mesh.callOne(r, 'copyPrepare', copyBytes)));
    const measureCopy = async (reps: number) => {
      let best = Infinity;
      for (let rep = 0; rep < reps; rep++) {
        const secs = await Promise.all(copiers.map((r) => mesh.callOne(r, 'copyOnce')));
        best = Math.min(best, Math.max(...secs));
      }
      return (cores * 2 * copyBytes) / best / 1e9;
    };
    const streamCopyGBs = await measureCopy(5);
    print(`# STREAM-like copy: ${round(streamCopyGBs)} GB/s (read+write, ${cores} threads x ${copyBytes >> 20} MiB)`);
    if (opts.completions === 'none') print('# --completions none: timed ops enqueued without a host completion, the stream synchronized once');
    print(`# timed ops: ${COMPLETIONS_MODE[opts.completions]} (--completions ${opts.completions}); the target column says so too`);

    const rows: CollRow[] = [];
    const elem = opts.dtype === 'int64' ? 8 : opts.dtype === 'fp32' || opts.dtype === 'int32' ? 4 : 2;
    const sizes: number[] = [];
    for (let bytes = opts.minBytes; bytes <= opts.maxBytes; bytes *= opts.step) sizes.push(bytes);
    for (const op of opts.ops) {
      // Aim at ~0.3 s of work per row, 6..200 iterations.
      const plan = sizes.map((bytes) => {
        const c = counts(op, bytes, elem, p);
        const size = Math.max(c.send, c.recv) * elem;
        const estUs = 30 + trafficBytes(op, size, p) / (streamCopyGBs * 1e3) / 0.3;
        return { bytes, size, count: size / elem, iters: Math.max(6, Math.min(200, Math.round(3e5 / estUs))) };
      });
      const { redop, root } = ncclRedopRoot(op, opts.redop);
      const header = ncclHeaderLines({
        op,
        ranks: p,
        minBytes: opts.minBytes,
        maxBytes: opts.maxBytes,
        stepFactor: opts.step,
        warmupIters: WARMUP,
        iters: Math.min(...plan.map((x) => x.iters)),
        pid: process.pid,
        host: hostname(),
        device: 'Ascent simulated NPU',
      });
      // nccl-tests prints one iteration count; here it adapts per size (printed: the smallest).
      for (const line of header.slice(0, 2)) print(line);
      print(`# Ascent: iterations per size adapt to ~0.3 s of work (${plan.map((x) => x.iters).join(', ')}); time = p50 of the per-op cycle`);
      for (const line of header.slice(2)) print(line);
      const printed: NcclResult[] = [];
      for (const { bytes, size, count, iters } of plan) {
        const pair: CollRow[] = [];
        for (const inPlace of [false, true]) {
          // Memory-bound rows also get the copy measured just before them: the load of this
          // shared machine changes within a run (informational: the target keeps the run's baseline).
          const copyNearGBs = trafficBytes(op, size, p) >= NEAR_COPY_TRAFFIC ? round(await measureCopy(3), 3) : undefined;
          const results = await mesh.call('runCase', op, opts.dtype, bytes, iters, Math.min(WARMUP, iters), opts.redop, inPlace, opts.completions);
          // Op i is done when the slowest rank finished it; its time is the gap to op i-1 (the cycle time).
          const done = Array.from({ length: iters }, (_, i) => Math.max(...results.map((r) => r.endsMs[i]!)));
          const cycleUs = done
            .slice(1)
            .map((t, i) => (t - done[i]!) * 1000)
            .sort((a, b) => a - b);
          const timeUs = percentile(cycleUs, 50);
          const lastStart = Array.from({ length: iters }, (_, i) => Math.max(...results.map((r) => r.startsMs[i]!)));
          const arriveUs = percentile(
            lastStart
              .slice(1)
              .map((t, i) => (t - done[i]!) * 1000)
              .sort((a, b) => a - b),
            50,
          );
          const moveUs = percentile(
            done
              .slice(1)
              .map((t, i) => (t - lastStart[i + 1]!) * 1000)
              .sort((a, b) => a - b),
            50,
          );
          const algbw = size / (timeUs * 1e3);
          const efficiency = round(trafficBytes(op, size, p) / (timeUs * 1e3) / streamCopyGBs, 3);
          const row: CollRow = {
            op,
            inPlace,
            dtype: opts.dtype,
            redop,
            root,
            ranks: p,
            bytes: size,
            count,
            iters,
            timeUs: round(timeUs, 2),
            algbwGBs: round(algbw, 3),
            busbwGBs: round(algbw * busFactor(op, p), 3),
            wrong: results.reduce((a, r) => a + r.wrong, 0),
            efficiency,
            arriveUs: round(arriveUs, 1),
            moveUs: round(moveUs, 1),
            // Rank 0's window: the ranks start together (barrier) and end within an op of each other.
            cpuUsPerOp: round(results[0]!.cpuUs / iters, 1),
            wallUsPerOp: round(Math.max(...results.map((x) => x.wallUs)) / iters, 1),
          };
          if (copyNearGBs !== undefined) {
            row.copyNearGBs = copyNearGBs;
            row.efficiencyNear = round(trafficBytes(op, size, p) / (timeUs * 1e3) / copyNearGBs, 3);
          }
          const target = checkTarget(row);
          pair.push(target ? { ...row, target } : row);
        }
        rows.push(...pair);
        printed.push(...pair);
        print(ncclRow(size, count, NCCL_TYPE_NAME[opts.dtype], redop, root, pair[0]!, pair[1]!));
      }
      for (const line of ncclFooterLines(op, printed)) print(line);
    }
    await Promise.all(copiers.map((r) => mesh.callOne(r, 'copyDone')));
    const floor = floorRows(opts, sizes, print);
    const span = opts.processes > 0 ? await processRows(opts, sizes, print) : { rows: [], skipped: '--processes 0' };
    // Load average (1, 5, 15 min) at the end of the run: the machine is shared, and the
    // efficiency of memory-bound rows moves with what else runs.
    const load = loadavg().map((l) => round(l, 2));
    return {
      suite: 'collectives',
      date: new Date().toISOString(),
      baselines: { streamCopyGBs: round(streamCopyGBs, 3), streamThreads: cores },
      completions: opts.completions,
      loadAvgEnd: load,
      rows,
      floorRows: floor,
      processRows: span.rows,
      ...(span.skipped ? { processRowsSkipped: span.skipped } : {}),
    };
  } finally {
    await world.shutdown();
  }
}

export async function main(argv: string[]): Promise<void> {
  const result = await runCollectivesBench(argv);
  // Ascent's own columns, beside nccl-tests': efficiency against the STREAM-like copy, where a
  // cycle goes, the CPU an op costs and, on the rows a target names, whether it holds.
  console.log(
    formatTable(
      result.rows.map((r) => ({
        op: r.op,
        place: r.inPlace ? 'in' : 'out',
        'size(B)': r.bytes,
        'busbw(GB/s)': r.busbwGBs,
        efficiency: r.efficiency,
        'arrive(us)': r.arriveUs,
        'move(us)': r.moveUs,
        'eff(near)': r.efficiencyNear ?? '',
        'cpu(us)': r.cpuUsPerOp,
        'wall/op(us)': r.wallUsPerOp,
        target: r.target ? `${r.target.label} (${result.completions}): ${r.target.ratio} ${r.target.holds ? 'holds' : 'MISSED'}` : '',
      })),
    ),
  );
  console.log(`load average at the end (1, 5, 15 min): ${result.loadAvgEnd.join(', ')}`);
  console.log(`wrote ${writeResults('collectives', result)}`);
}
