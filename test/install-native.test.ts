// npm's install script (scripts/install-native.mjs) in a scratch package whose addon is one small C
// file, so a source build takes seconds: with no build it compiles and records what it compiled;
// with the same sources it reuses that build without compiling; when a source changed it compiles
// again, and so it does for every other reason the decision (scripts/prebuilt.mjs) gives. test/package.test.ts installs
// Ascent's own tarball, which takes the reuse path; this file is where the source build is tested.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RECORD, sourcesHash, whyBuildFromSource } from '../scripts/prebuilt.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const ADDON = join('build', 'Release', 'ascent_native.node');

const addonSource = (answer: number) => `#include <node_api.h>
static napi_value Init(napi_env env, napi_value exports) {
  napi_value v;
  napi_create_int32(env, ${answer}, &v);
  napi_set_named_property(env, exports, "answer", v);
  return exports;
}
NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
`;

let pkg = '';
// No Open MPI in the scratch package: its build has the main addon only.
const env = { ...process.env, ASCENT_NO_MPI: '1' };

// A compile is seconds on a quiet machine; the deadlines leave room for a loaded one.
function install(extra: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(process.execPath, ['scripts/install-native.mjs'], { cwd: pkg, encoding: 'utf8', env: { ...env, ...extra }, timeout: 240_000 });
  expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
  return r.stdout;
}

function answer(): number {
  const r = spawnSync(process.execPath, ['-e', `console.log(require(${JSON.stringify(join(pkg, ADDON))}).answer)`], { encoding: 'utf8' });
  expect(r.status, r.stderr).toBe(0);
  return Number(r.stdout.trim());
}

beforeAll(() => {
  pkg = mkdtempSync(join(tmpdir(), 'ascent-install-native-'));
  mkdirSync(join(pkg, 'scripts'));
  for (const f of ['install-native.mjs', 'build-native.mjs', 'prebuilt.mjs', 'mpi-flags.mjs']) copyFileSync(join(ROOT, 'scripts', f), join(pkg, 'scripts', f));
  mkdirSync(join(pkg, 'native'));
  writeFileSync(join(pkg, 'native', 'answer.c'), addonSource(1));
  writeFileSync(join(pkg, 'binding.gyp'), JSON.stringify({ targets: [{ target_name: 'ascent_native', sources: ['native/answer.c'] }] }));
});

afterAll(() => {
  if (pkg) rmSync(pkg, { recursive: true, force: true });
});

describe('scripts/install-native.mjs', () => {
  it('with no build it compiles from source and records the sources it compiled', () => {
    const out = install();
    expect(out).toContain(`install-native: building the addon from source: no build comes with these sources (${RECORD} is missing)`);
    expect(out).toContain('build-native: Open MPI not found');
    expect(answer()).toBe(1);
    const rec = JSON.parse(readFileSync(join(pkg, RECORD), 'utf8'));
    expect(rec).toEqual({ platform: process.platform, arch: process.arch, sources: sourcesHash(pkg), mpi: null, addons: ['ascent_native'] });
  }, 300_000);

  it('with the same sources it uses that build and compiles nothing', () => {
    const before = statSync(join(pkg, ADDON)).mtimeMs;
    const out = install();
    expect(out).toContain(`install-native: using the build that came with these same sources (${RECORD}): nothing to compile`);
    expect(out).not.toContain('build-native');
    expect(statSync(join(pkg, ADDON)).mtimeMs).toBe(before);
    expect(answer()).toBe(1);
  });

  it('once a source changed it compiles again, and the addon is the new source', () => {
    writeFileSync(join(pkg, 'native', 'answer.c'), addonSource(2));
    const out = install();
    expect(out).toContain('building the addon from source: binding.gyp or native/ differ from the sources the shipped build was made from');
    expect(answer()).toBe(2);
  }, 300_000);

  // Whenever the decision below gives a reason, the install compiles, as the two cases above show.
  it('a build that does not load here, or a source build asked for, is not reused', () => {
    const good = readFileSync(join(pkg, ADDON));
    writeFileSync(join(pkg, ADDON), 'not an ELF file');
    expect(whyBuildFromSource(pkg, null, env)).toMatch(/^build\/Release\/ascent_native\.node does not load here: Error: \S+ascent_native\.node: \w/);
    writeFileSync(join(pkg, ADDON), good);
    expect(whyBuildFromSource(pkg, null, env)).toBeNull();
    expect(whyBuildFromSource(pkg, null, { ...env, npm_config_build_from_source: 'true' })).toBe('asked for (--build-from-source)');
    expect(whyBuildFromSource(pkg, null, { ...env, ASCENT_BUILD_FROM_SOURCE: '1' })).toBe('asked for (--build-from-source)');
  });

  it('a build for another platform, other Open MPI flags, or an unreadable record are not reused, each saying why', () => {
    const recFile = join(pkg, RECORD);
    const rec = JSON.parse(readFileSync(recFile, 'utf8'));
    const mpi = { cflags: '-I/opt/mpi/include', libs: '-L/opt/mpi/lib -lmpi' };
    expect(whyBuildFromSource(pkg, mpi, env)).toBe('Open MPI here (-L/opt/mpi/lib -lmpi) is not what the shipped build was made with (none)');
    writeFileSync(recFile, JSON.stringify({ ...rec, arch: 'riscv64' }));
    expect(whyBuildFromSource(pkg, null, env)).toBe(`the shipped build is for ${process.platform}-riscv64, this is ${process.platform}-${process.arch}`);
    writeFileSync(recFile, '{ "platform":');
    expect(whyBuildFromSource(pkg, null, env)).toMatch(new RegExp(`^${RECORD.replace(/[/.]/g, '\\$&')} is unreadable \\(`));
    writeFileSync(recFile, JSON.stringify(rec));
    expect(whyBuildFromSource(pkg, null, env)).toBeNull();
  });
});
