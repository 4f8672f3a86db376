// npm's install script. A package packed from a built checkout carries that build and the record of
// what it was made from (scripts/prebuilt.mjs): when this copy's sources, platform and Open MPI are
// the same and the addons load, the install uses them and needs no compiler. Otherwise, and with
// `npm install --build-from-source` (or ASCENT_BUILD_FROM_SOURCE=1), it builds from source.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { mpiFlags } from './mpi-flags.mjs';
import { RECORD, whyBuildFromSource } from './prebuilt.mjs';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const why = whyBuildFromSource(root, mpiFlags());
if (why === null) {
  console.log(`install-native: using the build that came with these same sources (${RECORD}): nothing to compile`);
  process.exit(0);
}
console.log(`install-native: building the addon from source: ${why}`);
const r = spawnSync(process.execPath, [join(root, 'scripts', 'build-native.mjs')], { cwd: root, stdio: 'inherit' });
process.exit(r.status ?? 1);
