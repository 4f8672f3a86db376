// Finds Open MPI's compile and link flags for the optional ascent_mpi addon
// (binding.gyp runs it): `has` prints 1 or 0, `cflags` / `libs` print the flags
// (empty without MPI, so the build of the main addon never depends on it).
// Order: mpicc --showme, then pkg-config ompi. ASCENT_NO_MPI=1 builds without it.
import { spawnSync } from 'node:child_process';

function run(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return r.status === 0 && !r.error ? r.stdout.trim() : null;
}

export function mpiFlags() {
  if (process.env.ASCENT_NO_MPI === '1') return null;
  const cc = run('mpicc', ['--showme:compile']);
  const ld = run('mpicc', ['--showme:link']);
  if (cc !== null && ld !== null) return { cflags: cc, libs: ld, via: 'mpicc --showme' };
  const pc = run('pkg-config', ['--cflags', 'ompi']);
  const pl = run('pkg-config', ['--libs', 'ompi']);
  if (pc !== null && pl !== null) return { cflags: pc, libs: pl, via: 'pkg-config ompi' };
  return null;
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop())) {
  const f = mpiFlags();
  const what = process.argv[2];
  if (what === 'has') process.stdout.write(f ? '1' : '0');
  else if (what === 'cflags') process.stdout.write(f ? f.cflags : '');
  else if (what === 'libs') process.stdout.write(f ? f.libs : '');
  else {
    process.stderr.write('usage: node scripts/mpi-flags.mjs has|cflags|libs\n');
    process.exit(2);
  }
}
