// The MPI part is a separate addon: the main one never links libmpi (a single-process
// run must not need MPI), the MPI one is built and loads wherever Open MPI was found.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MPI_ADDON, ROOT, mpiSkipReason } from './helpers/mpirun.js';

const skip = mpiSkipReason();
if (skip) console.warn(`[mpi-build] skipping the MPI addon checks: ${skip}`);

function ldd(file: string): string {
  const r = spawnSync('ldd', [file], { encoding: 'utf8' });
  expect(r.status, r.stderr).toBe(0);
  return r.stdout;
}

describe('native build with and without MPI', () => {
  it('the main addon has no libmpi dependency', () => {
    const main = join(ROOT, 'build', 'Release', 'ascent_native.node');
    expect(existsSync(main)).toBe(true);
    const deps = ldd(main);
    expect(deps).toMatch(/libc\.so/); // ldd did list it
    expect(deps).not.toMatch(/libmpi|libopen-pal|libopen-rte/);
  });

  it('without MPI (ASCENT_NO_MPI=1 here) the detection finds none, so the build skips the MPI addon', () => {
    const r = spawnSync(process.execPath, ['-e', "import('./scripts/mpi-flags.mjs').then(m => console.log(JSON.stringify(m.mpiFlags())))"], {
      cwd: ROOT,
      encoding: 'utf8',
      env: { ...process.env, ASCENT_NO_MPI: '1' },
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe('null');
    const has = spawnSync(process.execPath, ['scripts/mpi-flags.mjs', 'has'], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, ASCENT_NO_MPI: '1' } });
    expect(has.stdout).toBe('0');
  });

  it.skipIf(skip !== null)('the MPI addon links libmpi and loads with its exports (no MPI_Init until asked)', () => {
    expect(ldd(MPI_ADDON)).toMatch(/libmpi\.so/);
    const r = spawnSync(process.execPath, ['-e', `const m = require(${JSON.stringify(MPI_ADDON)}); console.log(Object.keys(m).sort().join(','))`], {
      encoding: 'utf8',
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe(
      'abortJob,abortedBecause,allGather,allReduce,allToAll,barrier,broadcast,finalize,init,lookupComm,onAbort,recv,reduceScatter,send,split',
    );
  });
});
