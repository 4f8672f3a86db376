/**
 * The PyTorch peer of a bench suite: a Python script of ours in bench/ run under an
 * interpreter that has torch (Debian's python3-torch installs it for /usr/bin/python3),
 * one thread. Optional, as the OpenBLAS column is: null (with the reason) when no
 * interpreter imports torch; the suite then prints its own columns only.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const CANDIDATES = ['python3', '/usr/bin/python3'];

/**
 * Which BLAS the interpreter's torch has mapped, read from /proc/self/maps after a matmul.
 * Debian's torch calls the system libblas.so.3, whose provider is chosen by update-alternatives:
 * the reference (netlib) BLAS, when no OpenBLAS is installed, made the quickstart's PyTorch GRPO
 * step 9x slower here (3.15 s against 0.35 s), so a ratio against it would flatter Ascent.
 */
const BLAS_PROBE = `
import os, torch
torch.ones(64, 64) @ torch.ones(64, 64)
libs = sorted({os.path.realpath(l.split()[-1]) for l in open('/proc/self/maps') if 'blas' in l.lower() or 'mkl' in l.lower()})
print(torch.__version__)
print('\\n'.join(libs))
`;

export type TorchBlas = 'openblas' | 'mkl' | 'reference' | 'unknown';

export function blasKind(libraries: readonly string[]): TorchBlas {
  if (libraries.some((l) => /openblas/i.test(l))) return 'openblas';
  if (libraries.some((l) => /mkl/i.test(l))) return 'mkl';
  if (libraries.some((l) => /\/blas\/libblas\.so/.test(l))) return 'reference';
  return 'unknown';
}

export interface TorchPeer {
  python: string;
  version: string;
  blas: TorchBlas;
  blasLibraries: string[];
}

/**
 * The first interpreter that imports torch and what BLAS it runs on, or null with the reason
 * to print: no interpreter imports torch, or its torch runs on the reference BLAS.
 */
export function torchPython(): { peer: TorchPeer | null; reason: string } {
  for (const python of CANDIDATES) {
    const r = spawnSync(python, ['-c', BLAS_PROBE], { encoding: 'utf8', timeout: 60_000 });
    if (r.status !== 0) continue;
    const [version, ...libs] = r.stdout.trim().split('\n');
    const blasLibraries = libs.filter((l) => l.length > 0);
    const peer: TorchPeer = { python, version: version!.trim(), blas: blasKind(blasLibraries), blasLibraries };
    if (peer.blas === 'reference') {
      return {
        peer: null,
        reason: `PyTorch (${python}) runs on the reference BLAS (${blasLibraries.join(', ')}), about 10x slower than OpenBLAS: no torch columns, since a ratio against it would flatter Ascent. apt-get install libopenblas0-serial switches it.`,
      };
    }
    return { peer, reason: '' };
  }
  return { peer: null, reason: 'PyTorch not found: no torch columns (apt-get install python3-torch libopenblas0-serial to compare).' };
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
