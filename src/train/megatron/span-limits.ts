/**
 * Megatron does not train on a communicator that spans processes (mpirun -np P ascent
 * launch): there a collective's recv is complete only when its promise resolves (the
 * leg between processes runs on the host, see Communicator.spansProcesses), but the
 * tensor- and expert-parallel collectives run inside the synchronous backward (comm-ops.ts,
 * expert-parallel.ts) and the gradient all-reduces are consumed in stream order, so a
 * process leader would read stale bytes. It is refused before any collective (every rank
 * of the communicator sees the same property, so every rank throws alike) with one
 * ConfigError; fsdp2 awaits its collectives there and trains across processes.
 */
import type { Communicator } from '../../runtime/comm/comm.js';
import { ConfigError } from '../../runtime/errors.js';

/** Throws when `comm` spans processes (`where` names the call, e.g. 'MegatronStrategy.create()'). */
export function refuseMegatronAcrossProcesses(comm: Communicator | undefined, where: string): void {
  if (!comm?.spansProcesses) return;
  throw new ConfigError(
    `${where}: megatron does not train on ranks of more than one process in this build (this communicator has ${comm.size} ranks across processes): its tensor- and expert-parallel collectives and gradient all-reduces are not awaited, and between processes their results land only when awaited. HINT: train across processes with strategy 'fsdp2' (data parallel), or run megatron in one process (ascent launch --nproc-per-node N without mpirun, or put every trainer rank in one process).`,
    { where, size: comm.size },
  );
}
