// Builds the native addon with the node-gyp that ships inside npm, against the
// headers of the Node.js that runs this script. When those headers are installed
// locally (Debian's nodejs, nvm, the official tarball) they are used directly, so
// no header download is needed (a machine without network could not fetch them).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

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

const args = [findNodeGyp(), 'rebuild', '-j', '2'];
if (headerPrefix) args.push(`--nodedir=${headerPrefix}`);
const r = spawnSync(process.execPath, args, { stdio: 'inherit' });
process.exit(r.status ?? 1);
