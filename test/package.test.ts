// Ascent as a package: `examples/own-project.sh` packs this checkout, installs the tarball into a new
// project outside the repository and runs a 2-rank `launch` entry and a World script. The tarball
// carries this checkout's build of the addon and the record of its sources (scripts/prebuilt.mjs), so
// the install reuses it instead of compiling the same sources again; test/install-native.test.ts tests
// the source build it falls back to. Then: what the tarball holds, the types, the `ascent` bin, and a
// CommonJS project.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mpiFlags } from '../scripts/mpi-flags.mjs';
import { RECORD, whyBuildFromSource } from '../scripts/prebuilt.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');

/** A user's environment: none of the npm_* variables of the `npm test` that runs us. */
function userEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ASCENT_DEVICE_MEMORY: '256MiB' };
  for (const k of Object.keys(env)) if (k.startsWith('npm_')) delete env[k];
  return env;
}

let scratch = '';
let project = '';
let setup: ReturnType<typeof spawnSync>;
/** Why this checkout's build cannot ship as it is (null: the tarball carries it and the install reuses it). */
let notReusable: string | null = null;

function inProject(argv: string[]) {
  return spawnSync(argv[0]!, argv.slice(1), { cwd: project, encoding: 'utf8', env: userEnv(), timeout: 120_000 });
}
const launch = (...args: string[]) => inProject(['npx', '--no-install', 'launch', '--nproc', '2', ...args]);

const SUM_MJS = `import { Tensor } from 'ascent';
export async function main(ctx) {
  const x = Tensor.fromArray(ctx.device, new Float32Array([ctx.rank + 1]), [1]);
  const y = Tensor.zeros(ctx.device, [1]);
  await ctx.comm.allReduce(x, y, 'sum');
  ctx.log.info(\`mjs sum = \${(await y.toArray())[0]}\`);
}
`;

beforeAll(() => {
  if (!existsSync(join(ROOT, 'dist/src/index.js'))) throw new Error('dist/ is missing: run `npm run build` first (npm test does it).');
  scratch = mkdtempSync(join(tmpdir(), 'ascent-package-'));
  project = join(scratch, 'project');
  expect(relative(ROOT, project).startsWith('..'), 'the project must be outside the repository').toBe(true);
  notReusable = whyBuildFromSource(ROOT, mpiFlags());
  if (notReusable) console.warn(`[package] the install will compile the addon (${notReusable}); \`npm run build:native\` records a build it can reuse`);
  setup = spawnSync('bash', [join(ROOT, 'examples/own-project.sh'), project], { cwd: scratch, encoding: 'utf8', env: userEnv(), timeout: 540_000 });
}, 600_000);

afterAll(() => {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

describe('examples/own-project.sh in a new project outside the repository', () => {
  it('installs the tarball, then runs a 2-rank .ts entry with `npx --no-install launch` and a World script', () => {
    expect(setup.status, `${setup.stdout}\n${setup.stderr}`).toBe(0);
    expect(setup.stdout).toContain('[rank 0] sum over 2 ranks = 3');
    expect(setup.stdout).toContain('[rank 1] sum over 2 ranks = 3');
    expect(setup.stdout).toContain('add on every rank: [ 15, 15, 15, 15 ]');
    expect(setup.stdout).toContain('reward: 0.5');
  });

  it('the tarball holds dist/ (js and types), the native sources and build script, bin/, README and LICENSE, and nothing else', () => {
    const list = spawnSync('tar', ['-tzf', join(project, 'ascent-0.1.0.tgz')], { encoding: 'utf8' });
    expect(list.status, list.stderr).toBe(0);
    const files = list.stdout
      .trim()
      .split('\n')
      .map((f) => f.replace(/^package\//, ''));
    const allowed =
      /^(LICENSE|README\.md|package\.json|binding\.gyp|scripts\/(build-native|install-native|prebuilt|mpi-flags)\.mjs|bin\/[\w-]+\.mjs|native\/[\w/-]+\.(cc|h|inc)|dist\/src\/[\w/-]+\.(js|d\.ts)|build\/native-sources\.json|build\/Release\/ascent_(native|mpi)\.node)$/;
    expect(files.filter((f) => !allowed.test(f))).toEqual([]);
    for (const f of [
      'LICENSE',
      'README.md',
      'dist/src/index.js',
      'dist/src/index.d.ts',
      'dist/src/cli/launch.js',
      'dist/src/runtime/actor-system/rank-worker.js',
      'bin/launch.mjs',
      'bin/ascent.mjs',
      'native/addon.cc',
      'binding.gyp',
      'scripts/build-native.mjs',
      'scripts/install-native.mjs',
      'scripts/prebuilt.mjs',
      'scripts/mpi-flags.mjs',
    ]) {
      expect(files).toContain(f);
    }
    // This checkout's build and its record ship whenever they are there.
    if (notReusable === null) {
      const rec = JSON.parse(readFileSync(join(ROOT, RECORD), 'utf8')) as { addons: string[] };
      for (const f of [RECORD, ...rec.addons.map((a) => `build/Release/${a}.node`)]) expect(files).toContain(f);
    }
    const license = readFileSync(join(project, 'node_modules/ascent/LICENSE'), 'utf8');
    expect(license).toContain('Apache License');
    expect(license).toContain('Version 2.0, January 2004');
  });

  it('the install reused the shipped build of the same sources without compiling (or built it), and brought no TypeScript compiler', () => {
    const installed = join(project, 'node_modules/ascent');
    const rec = JSON.parse(readFileSync(join(installed, RECORD), 'utf8')) as { addons: string[] };
    expect(rec.addons).toContain('ascent_native');
    expect(rec.addons.includes('ascent_mpi')).toBe(mpiFlags() !== null);
    for (const a of rec.addons) expect(existsSync(join(installed, `build/Release/${a}.node`)), a).toBe(true);
    // node-gyp leaves its Makefile behind: there is one only when the install compiled.
    expect(existsSync(join(installed, 'build/Makefile'))).toBe(notReusable !== null);
    if (notReusable === null) {
      for (const a of rec.addons)
        expect(readFileSync(join(installed, `build/Release/${a}.node`)).equals(readFileSync(join(ROOT, `build/Release/${a}.node`))), a).toBe(true);
    }
    // Either way the installed copy now holds a build of its own sources that loads here.
    const again = inProject([process.execPath, join(installed, 'scripts/install-native.mjs')]);
    expect(again.status, again.stderr).toBe(0);
    expect(again.stdout).toContain(`install-native: using the build that came with these same sources (${RECORD}): nothing to compile`);
    expect(existsSync(join(project, 'node_modules/typescript'))).toBe(false);
    expect(existsSync(join(project, 'node_modules/tsx'))).toBe(true);
  });

  it('types come with the package: a correct file type-checks, a wrong call does not', () => {
    writeFileSync(
      join(project, 'bad.ts'),
      "import { Tensor, World } from 'ascent';\nexport const t: Tensor = Tensor.zeros('no device', [1]);\nexport const w: Promise<World> = World.create({ size: 'two' });\n",
    );
    // One compiler run over both files (a start of tsc is seconds): errors in bad.ts, none in sum.ts.
    writeFileSync(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { strict: true, module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', noEmit: true, skipLibCheck: true, types: [] },
        files: ['sum.ts', 'bad.ts'],
      }),
    );
    const r = inProject([process.execPath, TSC, '-p', 'tsconfig.json']);
    expect(r.status).not.toBe(0);
    expect(r.stdout).toMatch(/bad\.ts\(2,\d+\): error TS2345/);
    expect(r.stdout).toMatch(/bad\.ts\(3,\d+\): error TS2322/);
    // Every error is one of those two: the correct file and the package's types check clean.
    expect(r.stdout.match(/error TS\d+/g), r.stdout).toHaveLength(2);
    expect(r.stdout).not.toContain('sum.ts');
  });

  it('the ascent bin runs', () => {
    const r = inProject(['npx', '--no-install', 'ascent', '--help']);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/Usage: ascent/);
    expect(r.stdout).toContain('trace');
  });

  it('an .mjs entry runs under launch', () => {
    writeFileSync(join(project, 'sum.mjs'), SUM_MJS);
    const r = launch('sum.mjs');
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.match(/mjs sum = 3/g)).toHaveLength(2);
  });
});

describe('a CommonJS project (package.json without "type": "module")', () => {
  beforeAll(() => {
    const pkgFile = join(project, 'package.json');
    const pkg = JSON.parse(readFileSync(pkgFile, 'utf8')) as Record<string, unknown>;
    delete pkg.type;
    writeFileSync(pkgFile, JSON.stringify(pkg, null, 2));
  });

  it('.mjs entries and .mts entries run', () => {
    writeFileSync(join(project, 'sum.mjs'), SUM_MJS);
    const mjs = launch('sum.mjs');
    expect(mjs.status, mjs.stderr).toBe(0);
    expect(mjs.stdout.match(/mjs sum = 3/g)).toHaveLength(2);
    writeFileSync(join(project, 'sum.mts'), readFileSync(join(project, 'sum.ts')));
    const mts = launch('sum.mts');
    expect(mts.status, mts.stderr).toBe(0);
    expect(mts.stdout.match(/sum over 2 ranks = 3/g)).toHaveLength(2);
  });

  it('a .ts entry is refused before any rank starts, saying why and what to do', () => {
    const r = launch('sum.ts');
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(`The entry file ${join(project, 'sum.ts')} would load as CommonJS (${join(project, 'package.json')} has no "type": "module")`);
    expect(r.stderr).toContain('HINT: add "type": "module"');
    expect(r.stdout).not.toContain('[rank');
  });

  it('a World script (.mjs) runs, and a .ts actor module is refused with the same advice', () => {
    writeFileSync(
      join(project, 'counter.mjs'),
      'export class Counter { constructor(ctx, n) { this.n = n; this.rank = ctx.rank; } add(k) { return (this.n += k) * 100 + this.rank; } }\n',
    );
    writeFileSync(
      join(project, 'cjs-world.mjs'),
      "import { World } from 'ascent';\nconst world = await World.create({ size: 2 });\ntry {\n  const m = await world.spawn({ module: new URL(process.argv[2], import.meta.url), export: 'Counter', args: [1] });\n  console.log('results', JSON.stringify(await m.call('add', 2)));\n} finally {\n  await world.shutdown();\n}\n",
    );
    const ok = inProject([process.execPath, 'cjs-world.mjs', './counter.mjs']);
    expect(ok.status, ok.stderr).toBe(0);
    expect(ok.stdout).toContain('results [300,301]');
    const ts = inProject([process.execPath, 'cjs-world.mjs', './counter.ts']);
    expect(ts.status).not.toBe(0);
    expect(ts.stderr).toContain(`The actor module ${join(project, 'counter.ts')} would load as CommonJS`);
  });
});
