/**
 * Where the trainer and the rollout engine run when the config says `mode: 'auto'` (the
 * default).
 *
 * - colocate: both on every rank, the engine asleep while the trainer trains. Every rank
 *   works in both phases, as verl's hybrid engine does.
 * - server: trainers on half the ranks, engines on the other half. Each phase then has half
 *   as many participants, and the ranks of the other role idle while it runs.
 *
 * A rank's device here runs its kernels on host threads, so the choice is about the host's
 * cores:
 * - When every rank has a core of its own, colocate keeps them all busy in both phases. At 2
 *   ranks on 2 cores the quickstart's step is 25-30% shorter than in server mode, which
 *   leaves one core idle while the other generates or trains.
 * - When ranks outnumber the cores, the cores are busy either way, and what counts is the
 *   work each step costs. Colocate costs more: twice the participants per collective, twice
 *   the engines with half the sequences each. At 16 ranks on 2 cores it took 1.3-1.5x server
 *   mode's CPU per step.
 *
 * A run spread over several processes (mpirun) resolves to server. Every process must reach
 * the same answer, and their hosts' core counts may differ.
 */
import { availableParallelism } from 'node:os';

export type GrpoMode = 'server' | 'colocate';

/** The host as the placement sees it: ranks in this process and the cores it may use. */
export interface HostShape {
  /** Ranks this process runs (the world size when one process runs them all). */
  ranksInProcess: number;
  /** Cores this process may use (os.availableParallelism()). */
  cores: number;
}

/** This process's host shape when it runs the whole world. */
export function singleProcessHost(worldSize: number): HostShape {
  return { ranksInProcess: worldSize, cores: availableParallelism() };
}

/**
 * The mode a run uses: an explicit `server` or `colocate` as given; `auto` resolves to
 * colocate when one process runs every rank and the host has a core per rank, and to
 * server otherwise. A config that sets `trainer.ranks` (a server-mode split) also resolves
 * to server.
 */
export function resolveMode(mode: GrpoMode | 'auto', worldSize: number, host: HostShape, trainerRanks?: number): GrpoMode {
  if (mode !== 'auto') return mode;
  if (trainerRanks !== undefined) return 'server';
  return host.ranksInProcess === worldSize && worldSize <= host.cores ? 'colocate' : 'server';
}
