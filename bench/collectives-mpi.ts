/**
 * The 2-process rows of `bench collectives`: fp32 sum allReduce on P processes x N ranks
 * under mpirun (bench/collectives-span.ts), beside Open MPI's own MPI_Allreduce on P x N
 * processes (bench/mpi-allreduce.c, built here with mpicc) measured in the same run.
 * Skipped, with the reason, where mpirun, mpicc or Ascent's MPI addon is missing.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { round } from './stats.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface SpanRow {
  op: 'allReduce';
  processes: number;
  ranks: number;
  bytes: number;
  iters: number;
  timeUs: number;
  busbwGBs: number;
  wrong: number;
  /** Open MPI's MPI_Allreduce on `ranks` processes, same size. */
  mpiTimeUs: number;
  mpiBusbwGBs: number;
  mpiWrong: number;
  /** Ascent's time / MPI's (above 1: Ascent is slower). */
  vsMpi: number;
}

/** Why the 2-process rows cannot run here, or null. */
export function spanSkipReason(): string | null {
  for (const tool of ['mpirun', 'mpicc']) {
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) return `${tool} not found (scripts/install-mpi.sh installs Open MPI)`;
  }
  if (!existsSync(join(ROOT, 'build', 'Release', 'ascent_mpi.node'))) return "Ascent's MPI addon is not built (npm run build:native after installing Open MPI)";
  return null;
}

// Root in a container needs Open MPI's consent; CMA (single-copy) is often blocked by ptrace rules there.
const MPI_ENV = {
  OMPI_ALLOW_RUN_AS_ROOT: '1',
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1',
  OMPI_MCA_btl_vader_single_copy_mechanism: 'none',
  OMPI_MCA_rmaps_base_oversubscribe: '1',
};

/** Runs a command; SIGKILLs its process group after `guardMs` (a hang fails the row set, not the bench). */
function run(cmd: string, args: string[], guardMs: number, env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd: ROOT, env: { ...process.env, ...MPI_ENV, ...env }, detached: true });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const guard = setTimeout(() => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
    }, guardMs);
    child.on('close', (code) => {
      clearTimeout(guard);
      resolve({ code, stdout, stderr });
    });
  });
}

function failed(what: string, r: { code: number | null; stderr: string }): Error {
  return new Error(`${what} failed (exit ${r.code}): ${r.stderr.trim().split('\n').slice(-5).join(' | ')}`);
}

/** Both columns for every size; throws with the tool's last lines when a run fails. */
export async function runSpanRows(opts: { processes: number; ranksPerProcess: number; sizes: number[]; iters: number }): Promise<SpanRow[]> {
  const ranks = opts.processes * opts.ranksPerProcess;
  const sizes = opts.sizes.map(String);
  const guardMs = 600_000;
  const dir = mkdtempSync(join(tmpdir(), 'ascent-bench-mpi-'));
  try {
    const exe = join(dir, 'mpi-allreduce');
    const cc = spawnSync('mpicc', ['-O2', '-o', exe, join(ROOT, 'bench', 'mpi-allreduce.c')], { encoding: 'utf8' });
    if (cc.status !== 0) throw new Error(`mpicc failed: ${cc.stderr}`);
    const mpi = await run('mpirun', ['-np', String(ranks), '--oversubscribe', '--bind-to', 'none', exe, String(opts.iters), ...sizes], guardMs);
    if (mpi.code !== 0) throw failed('MPI_Allreduce baseline', mpi);
    const base = new Map(
      mpi.stdout
        .trim()
        .split('\n')
        .map((l) => l.trim().split(/\s+/).map(Number))
        .map(([bytes, us, wrong]) => [bytes!, { us: us!, wrong: wrong! }] as const),
    );
    const entry = join(ROOT, 'dist', 'bench', 'collectives-span.js');
    const ascent = await run(
      'mpirun',
      [
        '-np',
        String(opts.processes),
        '--oversubscribe',
        '--bind-to',
        'none',
        process.execPath,
        join(ROOT, 'bin', 'launch.mjs'),
        '--nproc-per-node',
        String(opts.ranksPerProcess),
        entry,
        String(opts.iters),
        ...sizes,
      ],
      guardMs,
    );
    const line = /SPAN (\[.*\])/.exec(ascent.stdout)?.[1];
    if (ascent.code !== 0 || !line) throw failed(`Ascent allReduce on ${opts.processes} processes`, ascent);
    const factor = (2 * (ranks - 1)) / ranks;
    return (JSON.parse(line) as Array<{ bytes: number; timeUs: number; wrong: number }>).map((r) => {
      const b = base.get(r.bytes);
      if (!b) throw new Error(`the MPI_Allreduce baseline printed no row for ${r.bytes} bytes`);
      return {
        op: 'allReduce',
        processes: opts.processes,
        ranks,
        bytes: r.bytes,
        iters: opts.iters,
        timeUs: round(r.timeUs, 2),
        busbwGBs: round((r.bytes / (r.timeUs * 1e3)) * factor, 3),
        wrong: r.wrong,
        mpiTimeUs: round(b.us, 2),
        mpiBusbwGBs: round((r.bytes / (b.us * 1e3)) * factor, 3),
        mpiWrong: b.wrong,
        vsMpi: round(r.timeUs / b.us, 2),
      };
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
