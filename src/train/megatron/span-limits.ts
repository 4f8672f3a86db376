/**
 * What megatron runs on a communicator that spans processes (mpirun -np P ascent launch).
 * There a collective's recv is complete only when its promise resolves (the leg between
 * processes runs on the host, see Communicator.spansProcesses):
 * - data parallelism (tp = 1, ep = 1) trains: the strategy awaits its gradient all-reduces,
 *   loss sums and state gathers before reading them when their communicator spans processes;
 * - tp > 1 or ep > 1 is refused: the tensor- and expert-parallel collectives run inside the
 *   synchronous backward (comm-ops.ts, expert-parallel.ts), where nothing can await, so a
 *   process leader would read stale bytes. Refused before any collective (every rank of the
 *   communicator sees the same sizes and property, so every rank throws alike) with one
 *   ConfigError; fsdp2 trains across processes over every rank.
 */
import type { Communicator } from '../../runtime/comm/comm.js';
import { ConfigError } from '../../runtime/errors.js';

/** Throws when `comm` spans processes and tp or ep is above 1 (`where` names the call, e.g. 'MegatronStrategy.create()'). */
export function refuseMegatronAcrossProcesses(comm: Communicator | undefined, tp: unknown, ep: unknown, where: string): void {
  if (!comm?.spansProcesses) return;
  const [t, e] = [tp ?? 1, ep ?? 1];
  if (t === 1 && e === 1) return;
  throw new ConfigError(
    `${where}: megatron runs only data parallelism (tp=1, ep=1) on ranks of more than one process in this build, but got tp=${String(t)}, ep=${String(e)} (this communicator has ${comm.size} ranks across processes): its tensor- and expert-parallel collectives run inside the backward, where their results between processes cannot be awaited. HINT: across processes use tp=1 and ep=1, or strategy 'fsdp2'; or run tp / ep in one process (ascent launch --nproc-per-node N without mpirun).`,
    { where, tp: t, ep: e, size: comm.size },
  );
}
