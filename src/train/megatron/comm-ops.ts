/**
 * Differentiable collectives recorded on the tape, for tensor and expert parallelism.
 * Each enqueues its collective on the tape's stream (no host sync) in forward, and the
 * conjugate collective in backward, so every rank of a group issues the same ops in the
 * same order (the tapes of all ranks have the same nodes):
 * - copyToTp: identity forward, all-reduce (sum) of the gradient over tp in backward;
 *   before column-parallel linears (and on parameters used only by local heads).
 * - reduceFromTp: all-reduce (sum) forward, identity backward; after row-parallel linears.
 * - allToAllRows: rows of x to other ranks by host-known row counts (token dispatch);
 *   backward sends the gradient rows back with the splits swapped.
 * Collective promises go to a PendingComms, awaited at the end of the step so a failed
 * collective surfaces as a rejection of forwardBackward (never unhandled).
 */
import { Tensor } from '../../runtime/device/device-index.js';
import type { Communicator } from '../../runtime/comm/comm.js';
import { Var, type Tape } from '../../model/autograd.js';

/** Completion promises of the collectives one step enqueued. */
export class PendingComms {
  private list: Promise<void>[] = [];

  track(p: Promise<void>): void {
    p.catch(() => undefined); // surfaced by settle()
    this.list.push(p);
  }

  /** Waits for every tracked collective; rejects with the first failure. */
  async settle(): Promise<void> {
    const list = this.list;
    this.list = [];
    await Promise.all(list);
  }
}

/** Identity forward; the gradient is summed over `comm` in backward. */
export function copyToTp(tape: Tape, x: Var, comm: Communicator, pending: PendingComms): Var {
  if (comm.size === 1) return x;
  const y = new Var(x.value, false, x.name);
  tape.record('copyToTp', [x], [y], ([dy]) => {
    const dx = tape.own(Tensor.empty(dy!.device, dy!.shape, dy!.dtype));
    pending.track(comm.allReduce(dy!, dx, 'sum', tape.stream));
    return [dx];
  });
  return y;
}

/** Sum over `comm` forward; identity backward. */
export function reduceFromTp(tape: Tape, x: Var, comm: Communicator, pending: PendingComms): Var {
  if (comm.size === 1) return x;
  const y = tape.result(Tensor.empty(x.value.device, x.value.shape, x.value.dtype));
  pending.track(comm.allReduce(x.value, y.value, 'sum', tape.stream));
  tape.record('reduceFromTp', [x], [y], ([dy]) => [dy]);
  return y;
}

function displs(counts: readonly number[]): number[] {
  const d: number[] = [];
  let o = 0;
  for (const c of counts) {
    d.push(o);
    o += c;
  }
  return d;
}

/**
 * x [N, H] → y [Σ recvRows, H]: sendRows[q] consecutive rows of x (in rank order) go to
 * rank q; recvRows[p] rows from rank p land in rank order. The caller knows both splits
 * on the host (they must agree across ranks: rank q's sendRows[r] = rank r's recvRows[q]).
 */
export function allToAllRows(tape: Tape, x: Var, comm: Communicator, sendRows: readonly number[], recvRows: readonly number[], pending: PendingComms): Var {
  const H = x.value.shape[1]!;
  const R = recvRows.reduce((a, b) => a + b, 0);
  const scaled = (c: readonly number[]) => c.map((n) => n * H);
  const exchange = (src: Tensor, dst: Tensor, s: readonly number[], r: readonly number[]) =>
    pending.track(comm.allToAllV(src, scaled(s), scaled(displs(s)), dst, scaled(r), scaled(displs(r)), tape.stream));
  const y = tape.result(Tensor.empty(x.value.device, [R, H], x.value.dtype));
  exchange(x.value, y.value, sendRows, recvRows);
  tape.record('allToAllRows', [x], [y], ([dy]) => {
    const dx = tape.own(Tensor.empty(x.value.device, x.value.shape, x.value.dtype));
    exchange(dy!, dx, recvRows, sendRows);
    return [dx];
  });
  return y;
}
