// Runs `mpirun -np P node bin/launch.mjs ...` for the multi-process tests, and says
// why those tests are skipped when Open MPI or Ascent's MPI addon is missing.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const MPI_ADDON = join(ROOT, 'build', 'Release', 'ascent_mpi.node');

/** Why the mpirun tests cannot run here, or null when they can. */
export function mpiSkipReason(): string | null {
  const which = spawnSync('sh', ['-c', 'command -v mpirun'], { encoding: 'utf8' });
  if (which.status !== 0) return 'mpirun not found (run scripts/install-mpi.sh, then npm run build:native)';
  if (!existsSync(MPI_ADDON)) return `${MPI_ADDON} is missing (Open MPI was not found at build time: run npm run build:native)`;
  return null;
}

// Root in a container needs Open MPI's consent; CMA (single-copy) is often blocked by ptrace rules there.
export const MPI_ENV: NodeJS.ProcessEnv = {
  OMPI_ALLOW_RUN_AS_ROOT: '1',
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1',
  OMPI_MCA_btl_vader_single_copy_mechanism: 'none',
  OMPI_MCA_rmaps_base_oversubscribe: '1',
};

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** The pids of process `process` of an mpirun job started with ASCENT_TEST_MARK=`mark` (and of any child it started), read from /proc. */
export function mpiProcessPids(mark: string, process: number): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    let env: string;
    try {
      env = readFileSync(`/proc/${d}/environ`, 'latin1');
    } catch {
      continue; // gone, or not ours
    }
    const vars = env.split('\0');
    if (vars.includes(`ASCENT_TEST_MARK=${mark}`) && vars.includes(`OMPI_COMM_WORLD_RANK=${process}`)) out.push(Number(d));
  }
  return out;
}

/**
 * mpirun -np `np` node bin/launch.mjs `args`; SIGKILLed after `guardMs` (a hang then fails the
 * test, not the suite). `watch` sees the stdout so far on every chunk (to act mid-run).
 */
export function mpirunLaunch(np: number, args: string[], env: NodeJS.ProcessEnv = {}, guardMs = 90_000, watch?: (stdout: string) => void): Promise<RunResult> {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const child = spawn('mpirun', ['-np', String(np), '--oversubscribe', '--bind-to', 'none', process.execPath, join(ROOT, 'bin', 'launch.mjs'), ...args], {
      cwd: ROOT,
      env: { ...process.env, ASCENT_DEVICE_MEMORY: '64MiB', ...MPI_ENV, ...env },
      detached: true,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
      watch?.(stdout);
    });
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
      resolve({ code, stdout, stderr, ms: Date.now() - t0 });
    });
  });
}
