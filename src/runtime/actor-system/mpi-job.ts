/**
 * A launch under mpirun: `mpirun -np P ascent launch --nproc-per-node N entry.ts`
 * runs P processes of N ranks each. Open MPI tells each process its place through
 * OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK; the process's index is the node
 * rank (torchrun's name), global rank = node rank x N + local rank.
 *
 * The session owns the process's MPI lifetime: init (bounded by the connect
 * timeout), abort notices both ways (this process's failure is told to every
 * other one; another's makes this one's ranks fail at once, naming it), and
 * finalize after a clean run (bounded too: a finalize that hangs on a dead peer
 * must not keep the process alive).
 */
import { ConfigError, InvalidStateError } from '../errors.js';
import { loadNet, netError, type NativeNet, type NetInfo } from '../comm/net.js';

export { culpritTag, taggedCulprits } from '../comm/net.js';
import type { ProcessLayout } from '../comm/spanning-comm.js';

export interface MpiJob extends ProcessLayout {
  /** This process's index among the processes on its host (OMPI_COMM_WORLD_LOCAL_RANK). */
  localProcess: number;
  /** Processes on this process's host (OMPI_COMM_WORLD_LOCAL_SIZE; all of them when unset). */
  localSize: number;
}

function intVar(env: NodeJS.ProcessEnv, name: string, min: number): number {
  const raw = env[name];
  if (raw === undefined || !/^\d+$/.test(raw.trim()) || Number(raw) < min) {
    throw new ConfigError(
      `${name}=${JSON.stringify(raw)} is not an integer >= ${min}, yet OMPI_COMM_WORLD_SIZE is set. HINT: start the processes with Open MPI's mpirun (it sets OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK), or unset OMPI_COMM_WORLD_SIZE for a single-process run.`,
    );
  }
  return Number(raw);
}

/** The job this process belongs to, or null outside mpirun (then nothing here touches MPI). */
export function detectMpiJob(env: NodeJS.ProcessEnv = process.env): MpiJob | null {
  if (env.OMPI_COMM_WORLD_SIZE === undefined) return null;
  const nnodes = intVar(env, 'OMPI_COMM_WORLD_SIZE', 1);
  const nodeRank = intVar(env, 'OMPI_COMM_WORLD_RANK', 0);
  if (nodeRank >= nnodes) {
    throw new ConfigError(`OMPI_COMM_WORLD_RANK=${nodeRank} is not below OMPI_COMM_WORLD_SIZE=${nnodes}. HINT: start the processes with mpirun.`);
  }
  const localProcess = env.OMPI_COMM_WORLD_LOCAL_RANK === undefined ? 0 : intVar(env, 'OMPI_COMM_WORLD_LOCAL_RANK', 0);
  const localSize = env.OMPI_COMM_WORLD_LOCAL_SIZE === undefined ? nnodes : intVar(env, 'OMPI_COMM_WORLD_LOCAL_SIZE', 1);
  return { nodeRank, nnodes, localProcess, localSize };
}

/** Describes a process by its index and global ranks, e.g. `process 1 (ranks 2-3)`. */
export function describeProcess(process: number, ranksPerProcess: number): string {
  const first = process * ranksPerProcess;
  return ranksPerProcess === 1 ? `process ${process} (rank ${first})` : `process ${process} (ranks ${first}-${first + ranksPerProcess - 1})`;
}

export class MpiSession {
  private constructor(
    readonly job: MpiJob,
    readonly info: NetInfo,
    private readonly net: NativeNet,
  ) {}

  /** Initializes MPI on the net thread; fails after `timeoutMs` or when MPI disagrees with mpirun's environment. */
  static async start(job: MpiJob, timeoutMs: number): Promise<MpiSession> {
    const net = loadNet();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new InvalidStateError(
              `MPI_Init did not finish within ${timeoutMs} ms on process ${job.nodeRank} of ${job.nnodes}. HINT: check that every process was started by the same mpirun; raise HCCL_CONNECT_TIMEOUT if start-up is just slow.`,
            ),
          ),
        timeoutMs,
      );
    });
    let json: string;
    try {
      json = await Promise.race([net.init().catch((e: unknown) => Promise.reject(netError(e, 'MPI init'))), deadline]);
    } finally {
      clearTimeout(timer);
    }
    const info = JSON.parse(json) as NetInfo;
    if (info.rank !== job.nodeRank || info.size !== job.nnodes) {
      throw new InvalidStateError(
        `MPI says this is process ${info.rank} of ${info.size} but OMPI_COMM_WORLD_RANK / _SIZE say ${job.nodeRank} of ${job.nnodes}. HINT: run Ascent with the mpirun of the Open MPI it was built against (scripts/install-mpi.sh).`,
      );
    }
    return new MpiSession(job, info, net);
  }

  /**
   * Every process's `text` (at most 511 bytes of UTF-8), in process order: an allGather
   * among processes, so every process must call it at the same point.
   */
  async exchange(text: string, timeoutMs: number): Promise<string[]> {
    const slot = 512;
    const mine = new Uint8Array(slot);
    const bytes = new TextEncoder().encode(text);
    if (bytes.length >= slot)
      throw new InvalidStateError(
        `exchange(): ${JSON.stringify(text)} (${bytes.length} bytes) does not fit the ${slot - 1}-byte slot. HINT: the actor gateway's address lives under TMPDIR: use a shorter TMPDIR.`,
      );
    mine.set(bytes);
    const all = new Uint8Array(slot * this.job.nnodes);
    await this.net.allGather(mine, all, timeoutMs).catch((e: unknown) => Promise.reject(netError(e, 'the exchange of addresses between processes')));
    const dec = new TextDecoder();
    return Array.from({ length: this.job.nnodes }, (_, p) => {
      const s = all.subarray(p * slot, (p + 1) * slot);
      const end = s.indexOf(0);
      return dec.decode(end < 0 ? s : s.subarray(0, end));
    });
  }

  /** Calls `fn` (on this thread) when another process aborts the job. */
  onPeerAbort(fn: (reason: string, process: number) => void): void {
    this.net.onAbort(fn);
  }

  /** Tells every other process that this one failed (bounded; best effort). */
  async abortJob(reason: string, timeoutMs = 2000): Promise<void> {
    await this.net.abortJob(reason, timeoutMs).catch(() => undefined);
  }

  /** MPI_Finalize after a clean run; resolves false if it did not finish within `timeoutMs`. */
  async finalize(timeoutMs: number): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<boolean>((r) => (timer = setTimeout(() => r(false), timeoutMs)));
    try {
      return await Promise.race([this.net.finalize().then(() => true), late]);
    } finally {
      clearTimeout(timer);
    }
  }
}
