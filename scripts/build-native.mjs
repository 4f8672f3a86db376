// Builds the native addon with the node-gyp that ships inside npm, against the
// headers of the Node.js that runs this script. When those headers are installed
// locally (Debian's nodejs, nvm, the official tarball) they are used directly, so
// no header download is needed (a machine without network could not fetch them).
import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { mpiFlags } from './mpi-flags.mjs';
import { RECORD, buildRecord } from './prebuilt.mjs';

const require = createRequire(import.meta.url);
// Debian's node reports node_prefix "/" while its headers are in /usr/include/node.
const prefixes = [process.config.variables.node_prefix, dirname(dirname(process.execPath)), '/usr', '/usr/local'].filter(Boolean);
const headerPrefix = prefixes.find((p) => existsSync(join(p, 'include', 'node', 'node_api.h')));
const prefix = headerPrefix ?? dirname(dirname(process.execPath));

function findNodeGyp() {
  try {
    return require.resolve('node-gyp/bin/node-gyp.js');
  } catch {
    // npm bundles node-gyp; find it next to the npm that runs us.
    const candidates = [
      process.env.npm_config_node_gyp,
      process.env.npm_execpath && join(dirname(process.env.npm_execpath), '..', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'),
      join(prefix, 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'),
    ].filter(Boolean);
    const found = candidates.find((c) => existsSync(c));
    if (!found) {
      console.error("build-native: node-gyp was not found (looked in npm's bundled copy). HINT: install npm >= 7, or `npm i -g node-gyp`.");
      process.exit(1);
    }
    return found;
  }
}

// The MPI addon (build/Release/ascent_mpi.node, multi-process launch) is built only
// when Open MPI is found; binding.gyp asks scripts/mpi-flags.mjs the same question.
const mpi = mpiFlags();
if (mpi) console.log(`build-native: Open MPI found (${mpi.via}): building ascent_mpi.node too`);
else console.log('build-native: Open MPI not found: building without ascent_mpi.node (multi-process launch unavailable; scripts/install-mpi.sh installs it)');

// What this build is made from, taken before it starts (node-gyp rebuild empties build/) and
// written only once it succeeded: an install of these same sources reuses it (install-native.mjs).
const record = buildRecord(process.cwd(), mpi);
const args = [findNodeGyp(), 'rebuild', '-j', '2'];
if (headerPrefix) args.push(`--nodedir=${headerPrefix}`);
const r = spawnSync(process.execPath, args, { stdio: 'inherit' });
if (r.status === 0) writeFileSync(RECORD, `${JSON.stringify(record, null, 2)}\n`);
process.exit(r.status ?? 1);
