/**
 * Runs a fixture under `bin/launch.mjs` (real worker ranks, ctx.comm, real
 * collectives) in a child process and collects the `RESULT {json}` lines the ranks
 * print. Builds dist/ first when src/parallel is newer than it (fixtures import
 * 'ascent', i.e. dist/).
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function newest(dir: string): number {
  return Math.max(
    0,
    ...readdirSync(dir, { recursive: true, encoding: 'utf8' })
      .filter((f) => f.endsWith('.ts'))
      .map((f) => statSync(join(dir, f)).mtimeMs),
  );
}

export function ensureParallelBuilt(): void {
  const entry = join(ROOT, 'dist', 'src', 'parallel', 'index.js');
  const srcRoot = join(ROOT, 'src');
  const dirs = readdirSync(srcRoot, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => join(srcRoot, d.name));
  const src = Math.max(...dirs.map(newest), statSync(join(srcRoot, 'index.ts')).mtimeMs);
  if (!existsSync(entry) || statSync(entry).mtimeMs < src) {
    spawnSync(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(ROOT, 'tsconfig.json')], { stdio: 'inherit' });
  }
}

export interface LaunchRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** Parsed `RESULT {json}` lines, sorted by their `rank`. */
  results: Array<Record<string, unknown> & { rank: number }>;
}

export function launchFixture(nproc: number, fixture: string, args: string[], env: NodeJS.ProcessEnv = {}, guardMs = 55_000): Promise<LaunchRun> {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      [join(ROOT, 'bin', 'launch.mjs'), '--nproc', String(nproc), '--grace-period', '1', '--no-prefix', join(ROOT, fixture), ...args],
      {
        cwd: ROOT,
        env: { ...process.env, ASCENT_DEVICE_MEMORY: '64MiB', ...env },
      },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    // Only turns a hang into a failure.
    const guard = setTimeout(() => child.kill('SIGKILL'), guardMs);
    child.on('close', (code) => {
      clearTimeout(guard);
      const results = stdout
        .split('\n')
        .filter((l) => l.startsWith('RESULT '))
        .map((l) => JSON.parse(l.slice(7)) as Record<string, unknown> & { rank: number })
        .sort((a, b) => a.rank - b.rank);
      resolve({ code, stdout, stderr, results });
    });
  });
}
