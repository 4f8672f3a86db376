// The README works as written: every code block is either a file under examples/ (included verbatim)
// or commands that name real npm scripts, files and bench suites; the cheap commands run here, and the
// main command runs the built local bin without building anything or touching npx's cache.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
const BENCH_SUITES = Object.keys(
  Object.fromEntries([...readFileSync(join(ROOT, 'bench/main.ts'), 'utf8').matchAll(/^\s+'?([\w-]+)'?: \(\) => import\(/gm)].map((m) => [m[1], true])),
);

interface Block {
  lang: string;
  body: string;
  line: number;
}

function codeBlocks(md: string): Block[] {
  const out: Block[] = [];
  for (const m of md.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)) out.push({ lang: m[1]!, body: m[2]!, line: md.slice(0, m.index).split('\n').length });
  return out;
}

/** A block whose first line names a file under examples/ (`// examples/x.ts — ...` or `# examples/x.sh — ...`). */
function exampleFile(b: Block): string | undefined {
  const first = b.body.split('\n')[0]!;
  const shebangFree = first.startsWith('#!') ? b.body.split('\n')[1]! : first;
  return /^(?:\/\/|#) (examples\/[\w./-]+)/.exec(shebangFree)?.[1];
}

/** The shell commands of a command block: comments dropped, `&&` split. */
function commands(b: Block): string[][] {
  return b.body
    .split('\n')
    .map((l) =>
      l
        .replace(/\s+#.*$/, '')
        .replace(/^#.*$/, '')
        .trim(),
    )
    .filter(Boolean)
    .flatMap((l) => l.split('&&').map((c) => c.trim().split(/\s+/)));
}

const blocks = codeBlocks(README);
const commandBlocks = blocks.filter((b) => b.lang === 'sh' && exampleFile(b) === undefined);

/** The env of a command run as a user would, without the npm_* variables of the `npm test` around us. */
function userEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ASCENT_DEVICE_MEMORY: '256MiB' };
  for (const k of Object.keys(env)) if (k.startsWith('npm_')) delete env[k];
  return { ...env, ...extra };
}

function run(argv: string[], env = userEnv()) {
  return spawnSync(argv[0]!, argv.slice(1), { cwd: ROOT, encoding: 'utf8', env, timeout: 240_000 });
}

describe('README code blocks', () => {
  it('has the blocks this test knows how to check', () => {
    expect(blocks.length).toBeGreaterThanOrEqual(8);
    for (const b of blocks) expect(['sh', 'ts', 'js', 'text'], `README line ${b.line}: block language "${b.lang}"`).toContain(b.lang);
  });

  it('every ts/js block is a file under examples/, included verbatim', () => {
    const code = blocks.filter((b) => b.lang === 'ts' || b.lang === 'js');
    expect(code.length).toBeGreaterThanOrEqual(4);
    for (const b of code) {
      const file = exampleFile(b);
      expect(file, `README line ${b.line}: a code block must start with "// examples/<file>"`).toBeDefined();
      expect(readFileSync(join(ROOT, file!), 'utf8'), `README line ${b.line} differs from ${file}`).toBe(b.body);
    }
  });

  it('a sh block that names a script is that script, verbatim', () => {
    const scripts = blocks.filter((b) => b.lang === 'sh' && exampleFile(b) !== undefined);
    expect(scripts.map(exampleFile)).toContain('examples/own-project.sh');
    for (const b of scripts) expect(readFileSync(join(ROOT, exampleFile(b)!), 'utf8'), `README line ${b.line}`).toBe(b.body);
  });

  it('every command names a real npm script, file or bench suite, and never a bare npx', () => {
    // A leading `VAR=value` sets an environment variable for the command: the command is what follows.
    const all = commandBlocks.flatMap(commands).map((c) => {
      const at = c.findIndex((t) => !/^[A-Z][A-Z0-9_]*=\S*$/.test(t));
      return at > 0 ? c.slice(at) : c;
    });
    expect(all.length).toBeGreaterThanOrEqual(8);
    for (const c of all) {
      const where = `README command "${c.join(' ')}"`;
      if (c[0] === 'node') {
        expect(existsSync(join(ROOT, c[1]!)), where).toBe(true);
        continue;
      }
      expect(c[0], where).toBe('npm');
      if (c[1] === 'install' || c[1] === 'ci' || c[1] === 'test') continue;
      expect(c[1], where).toBe('run');
      expect(Object.keys(PKG.scripts), where).toContain(c[2]);
      const args = c.slice(c.indexOf('--') + 1);
      if (c[2] === 'bench') expect(BENCH_SUITES, where).toContain(args[0]);
      for (const a of args) if (/^examples\//.test(a)) expect(existsSync(join(ROOT, a)), where).toBe(true);
    }
    // Inside the clone `npx launch` would install the project into npx's cache and rebuild it.
    // The README warns against it once ("do not use `npx launch`"); it never tells the user to do it.
    const bareNpx = [...README.matchAll(/(.{0,12})`npx (?!--no-install)(?:launch|ascent)\b/g)].filter((m) => !m[1]!.endsWith('not use '));
    expect(bareNpx.map((m) => m[0])).toEqual([]);
    for (const b of blocks) expect(b.body, `README line ${b.line}`).not.toMatch(/npx (?!--no-install)(launch|ascent)\b/);
    expect(README).not.toMatch(/\.\.\/shared|shared\/DESIGN/);
  });
});

describe('README commands run as written', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'ascent-readme-'));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it('the launch example: every rank prints the all-reduced sum', () => {
    const cmd = commandBlocks.flatMap(commands).find((c) => c.includes('examples/sum.ts'));
    expect(cmd, 'the README runs examples/sum.ts').toBeDefined();
    const r = run(cmd!);
    expect(r.status, r.stderr).toBe(0);
    const n = Number(cmd![cmd!.indexOf('--nproc') + 1]);
    const sums = r.stdout.match(/sum over (\d+) ranks = (\d+)/g) ?? [];
    expect(sums).toHaveLength(n);
    for (const s of sums) expect(s).toBe(`sum over ${n} ranks = ${(n * (n + 1)) / 2}`);
  });

  it('the World example: actor calls, broadcast, typed ref and a pool task', () => {
    const cmd = commandBlocks.flatMap(commands).find((c) => c[0] === 'node' && c[1] === 'examples/world.mjs');
    expect(cmd).toBeDefined();
    const r = run([process.execPath, ...cmd!.slice(1)]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('add on every rank: [ 15, 15, 15, 15 ]');
    expect(r.stdout).toContain('add on rank 2: 16');
    expect(r.stdout).toContain('typed call on rank 0: 1 on rank 0 of 4'); // the broadcast reset ran first
    expect(r.stdout).toContain('reward: 0.5');
  });

  it('the main command runs the built bin: nothing is rebuilt and npx is not involved', () => {
    const main = commandBlocks.flatMap(commands).find((c) => c[1] === 'run' && c[2] === 'grpo');
    expect(main, "the README's main command is `npm run grpo`").toBeDefined();
    expect(PKG.scripts.grpo).toMatch(/^node bin\/launch\.mjs --nproc 16 examples\/grpo\.ts$/);
    const built = [join(ROOT, 'dist/src/index.js'), join(ROOT, 'dist/src/cli/launch.js'), join(ROOT, 'build/Release/ascent_native.node')];
    const before = built.map((f) => statSync(f).mtimeMs);
    const cache = join(scratch, 'npm-cache');
    // --help: the example's validateArgs answers it in the launcher, before any of the 16 ranks starts
    // (a rank's output would carry its "[rank N] " prefix).
    const r = run([...main!, '--', '--help'], userEnv({ npm_config_cache: cache }));
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^Usage: grpo \[options\]$/m);
    expect(r.stdout).not.toMatch(/\[rank \d+\]/);
    expect(r.stdout).not.toMatch(/\btsc\b|node-gyp|gyp info/);
    expect(built.map((f) => statSync(f).mtimeMs)).toEqual(before);
    expect(existsSync(join(cache, '_npx')) ? readdirSync(join(cache, '_npx')) : []).toEqual([]);
  });
});
