/**
 * `npm run bench -- collectives [--ranks N] [--op OP] [--dtype T] [--redop R] [--min-bytes B] [--max-bytes B]`
 *
 * nccl-tests-style rows for every op from 1 KiB to 256 MiB (x4 steps) on N in-process
 * ranks, beside a STREAM-like copy bandwidth measured in the same run with as many
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
 */
import { availableParallelism, loadavg } from 'node:os';
import { Command, Option } from 'commander';
import { World, type DType, type ReduceOp } from '../src/index.js';
import { counts, type BenchOp, type CollectivesBench } from './collectives-actor.js';
import { percentile, round, writeResults } from './stats.js';

const OPS: BenchOp[] = ['allReduce', 'allGather', 'reduceScatter', 'broadcast', 'allToAll'];
const REDUCING = new Set<BenchOp>(['allReduce', 'reduceScatter']);

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
  dtype: DType;
  redop: ReduceOp | '';
  root: number | '';
  ranks: number;
  bytes: number;
  count: number;
  timeUs: number;
  algbwGBs: number;
  busbwGBs: number;
  wrong: number;
  efficiency: number;
  arriveUs: number;
  moveUs: number;
}

function parse(argv: string[]) {
  const prog = new Command('bench collectives')
    .addOption(new Option('--ranks <n>', 'ranks').default('16'))
    .addOption(new Option('--op <op>', 'one op').choices(OPS))
    .addOption(new Option('--dtype <t>', 'dtype').choices(['fp32', 'bf16', 'fp16', 'int32', 'int64']).default('fp32'))
    .addOption(new Option('--redop <r>', 'reduce op').choices(['sum', 'prod', 'max', 'min', 'avg']).default('sum'))
    .addOption(new Option('--min-bytes <b>', 'smallest size').default(String(1024)))
    .addOption(new Option('--max-bytes <b>', 'largest size').default(String(256 * 1024 * 1024)))
    .addOption(new Option('--step <k>', 'size multiplier between rows').default('4'))
    .exitOverride();
  prog.parse(argv, { from: 'user' });
  const o = prog.opts();
  const int = (name: string, v: string, min: number) => {
    if (!/^\d+$/.test(v) || Number(v) < min) throw new Error(`Expected an integer >= ${min} for --${name} but received ${JSON.stringify(v)}`);
    return Number(v);
  };
  return {
    ranks: int('ranks', o.ranks, 1),
    ops: o.op ? [o.op as BenchOp] : OPS,
    dtype: o.dtype as DType,
    redop: o.redop as ReduceOp,
    minBytes: int('min-bytes', o.minBytes, 1),
    maxBytes: int('max-bytes', o.maxBytes, 1),
    step: int('step', o.step, 2),
  };
}

export async function runCollectivesBench(argv: string[]) {
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
    let best = Infinity;
    for (let rep = 0; rep < 5; rep++) {
      const secs = await Promise.all(copiers.map((r) => mesh.callOne(r, 'copyOnce')));
      best = Math.min(best, Math.max(...secs));
    }
    await Promise.all(copiers.map((r) => mesh.callOne(r, 'copyDone')));
    const streamCopyGBs = (cores * 2 * copyBytes) / best / 1e9;
    console.log(`STREAM-like copy: ${round(streamCopyGBs)} GB/s (read+write, ${cores} threads x ${copyBytes >> 20} MiB)`);

    const rows: CollRow[] = [];
    const elem = opts.dtype === 'int64' ? 8 : opts.dtype === 'fp32' || opts.dtype === 'int32' ? 4 : 2;
    for (const op of opts.ops) {
      for (let bytes = opts.minBytes; bytes <= opts.maxBytes; bytes *= opts.step) {
        const c = counts(op, bytes, elem, p);
        const size = Math.max(c.send, c.recv) * elem;
        // Aim at ~0.3 s of work per row, 5..200 iterations.
        const estUs = 30 + trafficBytes(op, size, p) / (streamCopyGBs * 1e3) / 0.3;
        const iters = Math.max(6, Math.min(200, Math.round(3e5 / estUs)));
        const results = await mesh.call('runCase', op, opts.dtype, bytes, iters, Math.min(10, iters), opts.redop);
        // Op i is done when the slowest rank finished it; its time is the gap to op i-1 (the cycle time).
        const done = Array.from({ length: iters }, (_, i) => Math.max(...results.map((r) => r.endsMs[i]!)));
        const cycleUs = done.slice(1).map((t, i) => (t - done[i]!) * 1000).sort((a, b) => a - b);
        const timeUs = percentile(cycleUs, 50);
        const lastStart = Array.from({ length: iters }, (_, i) => Math.max(...results.map((r) => r.startsMs[i]!)));
        const arriveUs = percentile(lastStart.slice(1).map((t, i) => (t - done[i]!) * 1000).sort((a, b) => a - b), 50);
        const moveUs = percentile(done.slice(1).map((t, i) => (t - lastStart[i + 1]!) * 1000).sort((a, b) => a - b), 50);
        const algbw = size / (timeUs * 1e3);
        rows.push({
          op,
          dtype: opts.dtype,
          redop: REDUCING.has(op) ? opts.redop : '',
          root: op === 'broadcast' ? 0 : '',
          ranks: p,
          bytes: size,
          count: size / elem,
          timeUs: round(timeUs, 1),
          algbwGBs: round(algbw, 3),
          busbwGBs: round(algbw * busFactor(op, p), 3),
          wrong: results.reduce((a, r) => a + r.wrong, 0),
          efficiency: round(trafficBytes(op, size, p) / (timeUs * 1e3) / streamCopyGBs, 3),
          arriveUs: round(arriveUs, 1),
          moveUs: round(moveUs, 1),
        });
        const last = rows[rows.length - 1]!;
        console.log(
          `${op.padEnd(14)}${String(last.bytes).padStart(12)}${String(last.count).padStart(11)}  ${opts.dtype.padEnd(6)}${String(last.redop).padEnd(5)}${String(last.root).padStart(4)}${last.timeUs.toFixed(1).padStart(11)}${last.algbwGBs.toFixed(2).padStart(8)}${last.busbwGBs.toFixed(2).padStart(8)}${String(last.wrong).padStart(7)}${last.efficiency.toFixed(2).padStart(7)}${last.arriveUs.toFixed(1).padStart(11)}${last.moveUs.toFixed(1).padStart(11)}`,
        );
      }
    }
    // Load average (1, 5, 15 min) at the end of the run: the machine is shared, and the
    // efficiency of memory-bound rows moves with what else runs.
    const load = loadavg().map((l) => round(l, 2));
    console.log(`load average: ${load.join(', ')}`);
    return { suite: 'collectives', date: new Date().toISOString(), baselines: { streamCopyGBs: round(streamCopyGBs, 3), streamThreads: cores }, loadAvg: load, rows };
  } finally {
    await world.shutdown();
  }
}

export async function main(argv: string[]): Promise<void> {
  console.log(`${'op'.padEnd(14)}${'size(B)'.padStart(12)}${'count'.padStart(11)}  ${'type'.padEnd(6)}${'redop'.padEnd(5)}${'root'.padStart(4)}${'time(us)'.padStart(11)}${'algbw'.padStart(8)}${'busbw'.padStart(8)}${'#wrong'.padStart(7)}${'eff'.padStart(7)}${'arrive(us)'.padStart(11)}${'move(us)'.padStart(11)}`);
  const result = await runCollectivesBench(argv);
  console.log(`wrote ${writeResults('collectives', result)}`);
}
