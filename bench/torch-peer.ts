/**
 * The PyTorch peer of a bench suite: a Python script of ours in bench/ run under an
 * interpreter that has torch (Debian's python3-torch installs it for /usr/bin/python3),
 * one thread. Optional, as the OpenBLAS column is: null (with the reason) when no
 * interpreter imports torch; the suite then prints its own columns only.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const CANDIDATES = ['python3', '/usr/bin/python3'];

/** The first interpreter that imports torch, or null. */
export function torchPython(): { python: string; version: string } | null {
  for (const python of CANDIDATES) {
    const r = spawnSync(python, ['-c', 'import torch; print(torch.__version__)'], { encoding: 'utf8', timeout: 60_000 });
    if (r.status === 0) return { python, version: r.stdout.trim() };
  }
  return null;
}

/** Runs bench/<script> with one JSON argument and parses the JSON it prints. */
export function runTorchScript<T>(python: string, script: string, arg: unknown, timeoutMs = 600_000): T {
  const path = fileURLToPath(new URL(`../../bench/${script}`, import.meta.url));
  const r = spawnSync(python, [path, JSON.stringify(arg)], {
    encoding: 'utf8',
    timeout: timeoutMs,
    env: { ...process.env, OMP_NUM_THREADS: '1', MKL_NUM_THREADS: '1' },
  });
  if (r.status !== 0) throw new Error(`bench: ${script} failed (${r.status ?? r.signal}): ${r.stderr.trim().split('\n').slice(-3).join(' | ')}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as T;
}
