/**
 * The text format of nccl-tests (NVIDIA/nccl-tests, src/common.cu and the per-op tests),
 * column for column, so that tools that read nccl-tests output read the collectives
 * suite's: `#`-prefixed header lines, one row per size with the out-of-place and the
 * in-place group (time, algbw, busbw, #wrong), `none` as the redop of ops that do not
 * reduce, `-1` as the root of ops without one, and the `# Out of bounds values` /
 * `# Avg bus bandwidth` footer. Pure formatting: no I/O.
 */
import type { DType, ReduceOp } from '../src/internal.js';
import type { BenchOp } from './collectives-actor.js';

/** The nccl-tests binary of each op. */
export const NCCL_TEST_NAME: Record<BenchOp, string> = {
  allReduce: 'all_reduce_perf',
  allGather: 'all_gather_perf',
  reduceScatter: 'reduce_scatter_perf',
  broadcast: 'broadcast_perf',
  allToAll: 'alltoall_perf',
};

/** nccl-tests' type names. */
export const NCCL_TYPE_NAME: Record<DType, string> = {
  fp32: 'float',
  fp16: 'half',
  bf16: 'bfloat16',
  int32: 'int32',
  int64: 'int64',
  uint8: 'uint8',
};

/** What nccl-tests prints as redop and root for an op. */
export function ncclRedopRoot(op: BenchOp, redop: ReduceOp): { redop: string; root: number } {
  const reduces = op === 'allReduce' || op === 'reduceScatter';
  return { redop: reduces ? redop : 'none', root: op === 'broadcast' ? 0 : -1 };
}

const padL = (s: string | number, w: number) => String(s).padStart(w);
const fixed = (x: number, d: number, w: number) => x.toFixed(d).padStart(w);

/** nccl-tests' time cell: %7.0f from 10 ms, %7.1f from 100 us, else %7.2f. */
export function ncclTime(us: number): string {
  return fixed(us, us >= 10_000 ? 0 : us >= 100 ? 1 : 2, 7);
}

/** C's %g (6 significant digits, trailing zeros dropped) for the bandwidth footer. */
export function cG(x: number): string {
  if (x === 0) return '0';
  const exp = Math.floor(Math.log10(Math.abs(x)));
  if (exp < -4 || exp >= 6) {
    const [m, e] = x.toExponential(5).split('e');
    const mant = m!.includes('.') ? m!.replace(/0+$/, '').replace(/\.$/, '') : m!;
    const n = Number(e);
    return `${mant}e${n < 0 ? '-' : '+'}${String(Math.abs(n)).padStart(2, '0')}`;
  }
  const s = x.toFixed(Math.max(0, 5 - exp));
  return s.includes('.') ? s.replace(/0+$/, '').replace(/\.$/, '') : s;
}

export interface NcclHeader {
  op: BenchOp;
  ranks: number;
  minBytes: number;
  maxBytes: number;
  stepFactor: number;
  warmupIters: number;
  iters: number;
  pid: number;
  host: string;
  device: string;
}

/** The lines before the first row (test start, parameters, devices, column heads). */
export function ncclHeaderLines(h: NcclHeader): string[] {
  const lines = [
    `# Collective test starting: ${NCCL_TEST_NAME[h.op]}`,
    `# nThread ${h.ranks} nGpus 1 minBytes ${h.minBytes} maxBytes ${h.maxBytes} step: ${h.stepFactor}(factor) warmup iters: ${h.warmupIters} iters: ${h.iters} agg iters: 1 validation: 1 graph: 0`,
    '#',
    '# Using devices',
  ];
  for (let r = 0; r < h.ranks; r++) {
    lines.push(`#  Rank ${padL(r, 2)} Group ${padL(0, 2)} Pid ${padL(h.pid, 6)} on ${padL(h.host, 10)} device ${padL(r, 2)} [0x00] ${h.device}`);
  }
  lines.push('#');
  lines.push(
    `# ${padL('', 10)}  ${padL('', 12)}  ${padL('', 8)}  ${padL('', 6)}  ${padL('', 6)}           out-of-place                       in-place          `,
  );
  lines.push(
    `# ${padL('size', 10)}  ${padL('count', 12)}  ${padL('type', 8)}  ${padL('redop', 6)}  ${padL('root', 6)}  ${padL('time', 7)}  ${padL('algbw', 6)}  ${padL('busbw', 6)} ${padL('#wrong', 6)}  ${padL('time', 7)}  ${padL('algbw', 6)}  ${padL('busbw', 6)} ${padL('#wrong', 6)}`,
  );
  lines.push(
    `# ${padL('(B)', 10)}  ${padL('(elements)', 12)}  ${padL('', 8)}  ${padL('', 6)}  ${padL('', 6)}  ${padL('(us)', 7)}  ${padL('(GB/s)', 6)}  ${padL('(GB/s)', 6)}  ${padL('', 5)}  ${padL('(us)', 7)}  ${padL('(GB/s)', 6)}  ${padL('(GB/s)', 6)}  ${padL('', 5)}`,
  );
  return lines;
}

export interface NcclResult {
  timeUs: number;
  algbwGBs: number;
  busbwGBs: number;
  wrong: number;
}

/** One row: size, count, type, redop, root, then the out-of-place and in-place results. */
export function ncclRow(bytes: number, count: number, type: string, redop: string, root: number, outOfPlace: NcclResult, inPlace: NcclResult): string {
  const group = (r: NcclResult) => `  ${ncclTime(r.timeUs)}  ${fixed(r.algbwGBs, 2, 6)}  ${fixed(r.busbwGBs, 2, 6)}  ${padL(r.wrong, 5)}`;
  return `${padL(bytes, 12)}  ${padL(count, 12)}  ${padL(type, 8)}  ${padL(redop, 6)}  ${padL(root, 6)}${group(outOfPlace)}${group(inPlace)}`;
}

/** The footer: failed checks (rows with #wrong > 0) and the mean busbw over every result printed. */
export function ncclFooterLines(op: BenchOp, results: readonly NcclResult[]): string[] {
  const errors = results.filter((r) => r.wrong !== 0).length;
  const avg = results.length ? results.reduce((a, r) => a + r.busbwGBs, 0) / results.length : 0;
  return [
    `# Out of bounds values : ${errors} ${errors ? 'FAILED' : 'OK'}`,
    `# Avg bus bandwidth    : ${cG(avg)} `,
    '#',
    `# Collective test concluded: ${NCCL_TEST_NAME[op]}`,
    '#',
  ];
}
