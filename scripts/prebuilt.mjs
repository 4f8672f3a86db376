// Which build of the addon a copy of Ascent may reuse instead of compiling. build-native.mjs records,
// after a build that succeeded, what it was built from (build/native-sources.json): a hash of
// binding.gyp and every file under native/, the platform, and the Open MPI flags of the MPI addon.
// The package ships that record with the addons, so an install whose sources, platform and MPI flags
// are the same, and where the addons load, needs no compiler; any other install builds from source.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

export const RECORD = join('build', 'native-sources.json');

/** sha256 over binding.gyp and every file under native/ (relative path and bytes, in path order). */
export function sourcesHash(root) {
  const native = readdirSync(join(root, 'native'), { recursive: true, encoding: 'utf8' })
    .map((f) => join('native', f).split('\\').join('/'))
    .filter((f) => statSync(join(root, f)).isFile());
  const h = createHash('sha256');
  for (const f of ['binding.gyp', ...native.sort()]) {
    h.update(`${f}\0`);
    h.update(readFileSync(join(root, f)));
    h.update('\0');
  }
  return h.digest('hex');
}

/** What build-native.mjs writes next to a build that succeeded. */
export function buildRecord(root, mpi) {
  return {
    platform: process.platform,
    arch: process.arch,
    sources: sourcesHash(root),
    mpi: mpi ? { cflags: mpi.cflags, libs: mpi.libs } : null,
    addons: mpi ? ['ascent_native', 'ascent_mpi'] : ['ascent_native'],
  };
}

/** The first line of why `file` does not load in a fresh Node.js, or null when it loads. */
function loadError(file) {
  const r = spawnSync(process.execPath, ['-e', 'process.dlopen({ exports: {} }, process.argv[1])', file], { encoding: 'utf8', timeout: 60_000 });
  if (r.status === 0) return null;
  const msg = (r.stderr || String(r.error ?? `exit ${r.status}`)).split('\n').find((l) => /error/i.test(l)) ?? `exit ${r.status}`;
  return msg.trim();
}

/**
 * Why the install at `root` must build from source, or null when the build it holds can be used as
 * it is. `mpi` is what scripts/mpi-flags.mjs finds here (null without Open MPI); `env` is read for
 * `npm install --build-from-source` (npm_config_build_from_source) and ASCENT_BUILD_FROM_SOURCE=1.
 */
export function whyBuildFromSource(root, mpi, env = process.env) {
  if (env.npm_config_build_from_source === 'true' || env.ASCENT_BUILD_FROM_SOURCE === '1') return 'asked for (--build-from-source)';
  const file = join(root, RECORD);
  if (!existsSync(file)) return `no build comes with these sources (${RECORD} is missing)`;
  let rec;
  try {
    rec = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    return `${RECORD} is unreadable (${e.message})`;
  }
  if (!Array.isArray(rec?.addons)) return `${RECORD} names no addons`;
  if (rec.platform !== process.platform || rec.arch !== process.arch) {
    return `the shipped build is for ${rec.platform}-${rec.arch}, this is ${process.platform}-${process.arch}`;
  }
  if (rec.sources !== sourcesHash(root)) return 'binding.gyp or native/ differ from the sources the shipped build was made from';
  const want = buildRecord(root, mpi).mpi;
  if (JSON.stringify(rec.mpi) !== JSON.stringify(want)) {
    return `Open MPI here (${want ? want.libs : 'none'}) is not what the shipped build was made with (${rec.mpi ? rec.mpi.libs : 'none'})`;
  }
  for (const name of rec.addons) {
    const addon = join(root, 'build', 'Release', `${name}.node`);
    if (!existsSync(addon)) return `build/Release/${name}.node is missing`;
    const err = loadError(addon);
    if (err) return `build/Release/${name}.node does not load here: ${err}`;
  }
  return null;
}
