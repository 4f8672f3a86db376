// Runs `mpirun -np P node bin/launch.mjs ...` for the multi-process tests, and says
// why those tests are skipped when Open MPI or Ascent's MPI addon is missing.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
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

/** mpirun -np `np` node bin/launch.mjs `args`; SIGKILLed after `guardMs` (a hang then fails the test, not the suite). */
export function mpirunLaunch(np: number, args: string[], env: NodeJS.ProcessEnv = {}, guardMs = 90_000): Promise<RunResult> {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const child = spawn('mpirun', ['-np', String(np), '--oversubscribe', '--bind-to', 'none', process.execPath, join(ROOT, 'bin', 'launch.mjs'), ...args], {
      cwd: ROOT,
      env: { ...process.env, ASCENT_DEVICE_MEMORY: '64MiB', ...MPI_ENV, ...env },
      detached: true,
    });
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
      resolve({ code, stdout, stderr, ms: Date.now() - t0 });
    });
  });
}
