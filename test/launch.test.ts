import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { packageValueImports } from '../src/runtime/actor-system/module-loader.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const fx = (f: string) => `test/fixtures/launch/${f}`;

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs `launch` as a user would; `hangGuardMs` only kills a hung run so the test fails instead of hanging. */
type OnChunk = (chunk: string, child: ReturnType<typeof spawn>) => void;

function runLaunch(args: string[], opts: Parameters<typeof runBin>[2] = {}): Promise<Run> {
  return runBin('launch.mjs', args, opts);
}

function runBin(
  bin: string,
  args: string[],
  opts: { hangGuardMs?: number; onStdout?: OnChunk; onStderr?: OnChunk; env?: NodeJS.ProcessEnv } = {},
): Promise<Run> {
  return new Promise((resolve) => {
    const env: NodeJS.ProcessEnv = { ...process.env, ASCENT_DEVICE_MEMORY: '64MiB', ...opts.env };
    if (!opts.env?.HCCL_CONNECT_TIMEOUT) delete env.HCCL_CONNECT_TIMEOUT;
    const child = spawn(process.execPath, [join(ROOT, 'bin', bin), ...args], { cwd: ROOT, env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
      opts.onStdout?.(String(d), child);
    });
    child.stderr.on('data', (d) => {
      stderr += d;
      opts.onStderr?.(String(d), child);
    });
    const guard = setTimeout(() => child.kill('SIGKILL'), opts.hangGuardMs ?? 45_000);
    child.on('close', (code, signal) => {
      clearTimeout(guard);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

describe('launch', () => {
  it('runs main(ctx) on 16 ranks with per-rank env, devices and prefixed output', async () => {
    const r = await runLaunch(['--nproc', '16', fx('hello.ts'), '--lr', '3e-4']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const reports = r.stdout
      .split('\n')
      .filter((l) => l.includes('"rank"'))
      .map((l) => {
        const m = /^\[rank (\d+)\] (.*)$/.exec(l)!;
        return { prefix: Number(m[1]), ...JSON.parse(m[2]!) };
      });
    expect(reports).toHaveLength(16);
    expect(new Set(reports.map((x) => x.rank)).size).toBe(16);
    for (const x of reports) {
      expect(x.prefix).toBe(x.rank);
      expect(x).toMatchObject({
        worldSize: 16,
        localRank: x.rank,
        envRank: String(x.rank),
        envWorld: '16',
        device: x.rank,
        args: ['--lr', '3e-4'],
        hcclConnectTimeout: '120',
      });
    }
    for (let rank = 0; rank < 16; rank++) expect(r.stdout).toContain(`[rank ${rank}] echo(hi from ${rank}) from 15`);
  });

  it('--rank0-only shows rank 0 output only', async () => {
    const r = await runLaunch(['--nproc', '4', '--rank0-only', fx('hello.ts')]);
    expect(r.code).toBe(0);
    const ranks = new Set([...r.stdout.matchAll(/^\[rank (\d+)\]/gm)].map((m) => m[1]));
    expect([...ranks]).toEqual(['0']);
  });

  it('a rank that throws fails the run: which rank, its error and stack, the others stopped, exit 1', async () => {
    const r = await runLaunch(['--nproc', '4', '--grace-period', '2', fx('fail.ts'), '2']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('[launch] rank 2 failed: Error: boom at rank 2');
    expect(r.stderr).toMatch(/at explode \(.*fail\.ts/);
    // The rank worker's own frames (how main was called) are not shown.
    expect(r.stderr).not.toContain('rank-worker.js');
    expect(r.stderr).toContain('[launch] stopping 3 other ranks (grace period 2000 ms)');
    expect(r.stderr).toContain('FAILED: 1 of 4 ranks failed (culprit: rank 2,');
    // The surviving ranks ran their stop hooks before they were terminated.
    for (const rank of [0, 1, 3]) expect(r.stdout).toContain(`[rank ${rank}] stop hook ran: launch is stopping the world`);
  });

  it('a rank that exits non-zero fails the run with its exit code', async () => {
    const r = await runLaunch(['--nproc', '3', fx('exit-code.mjs')]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('rank 2 exited with code 5');
  });

  it('a rank that crashes (uncaught exception) fails the run with the cause', async () => {
    const r = await runLaunch(['--nproc', '3', '--grace-period', '1', fx('crash.mjs')]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('[launch] rank 1 crashed: RangeError: uncaught in a timer on rank 1');
    expect(r.stderr).toMatch(/at Timeout\._onTimeout \(.*crash\.mjs/);
  });

  it('the wall-clock limit stops a stuck run and names the ranks still running', async () => {
    const r = await runLaunch(['--nproc', '3', '--max-time', '1.5', '--grace-period', '0.5', fx('stuck.mjs')]);
    expect(r.code).toBe(124);
    expect(r.stderr).toContain('wall-clock limit of 1.5 s reached; 1 rank still running: [1]');
    expect(r.stderr).toMatch(/rank 1: last output [\d.]+ s ago: "rank 1 is about to get stuck"/);
  });

  it('a world stopped while ranks wait in a collective aborts it blaming nobody', async () => {
    const r = await runLaunch(['--nproc', '3', '--max-time', '1.5', '--grace-period', '2', fx('stop-in-collective.mjs')]);
    expect(r.code).toBe(124);
    const results = r.stdout
      .split('\n')
      .filter((l) => l.includes('RESULT '))
      .map((l) => JSON.parse(l.slice(l.indexOf('RESULT ') + 7)) as { rank: number; code?: string; message?: string; culprits?: number[] | null });
    expect(results.map((x) => x.rank).sort()).toEqual([1, 2]);
    for (const x of results) {
      expect(x.code).toBe('ASCENT_COMM_ABORTED');
      expect(x.message).toMatch(/the world is stopping/);
      // The stop is nobody's fault: no rank (least of all the first to stop) is named as the culprit.
      expect(x.culprits ?? []).toEqual([]);
    }
  });

  it('SIGTERM stops all ranks cleanly', async () => {
    let waiting = 0;
    let signalled = false;
    const r = await runLaunch(['--nproc', '4', fx('forever.mjs')], {
      onStdout: (chunk, child) => {
        waiting += (chunk.match(/waiting/g) ?? []).length;
        // Once: a second signal means "terminate now" (tested below).
        if (waiting === 4 && !signalled) {
          signalled = true;
          child.kill('SIGTERM');
        }
      },
    });
    expect(r.code).toBe(143);
    expect(r.stderr).toContain('SIGTERM received; stopping 4 ranks');
    expect((r.stdout.match(/stopping: launch is stopping the world/g) ?? []).length).toBe(4);
  });

  it('a second signal terminates at once', async () => {
    let first = false;
    let second = false;
    // Signals sent back to back coalesce; the second goes once the first was seen.
    const r = await runLaunch(['--nproc', '2', fx('forever.mjs'), 'slow-stop'], {
      onStdout: (chunk, child) => {
        if (chunk.includes('waiting') && !first) {
          first = true;
          child.kill('SIGINT');
        }
      },
      onStderr: (chunk, child) => {
        if (chunk.includes('SIGINT received') && !second) {
          second = true;
          child.kill('SIGINT');
        }
      },
    });
    expect(r.code).toBe(130);
    expect(r.stderr).toContain('SIGINT again: terminating now');
  });

  it.each([
    [['--nproc', '0', 'test/fixtures/launch/hello.ts'], /Expected a positive integer for --nproc but received "0"/],
    [['--nproc', 'abc', 'test/fixtures/launch/hello.ts'], /Expected a positive integer for --nproc but received "abc"/],
    [['--nproc', '2', 'test/fixtures/launch/missing.ts'], /entry file "test\/fixtures\/launch\/missing.ts" does not exist/],
    [['--nproc', '2', '--bogus', 'test/fixtures/launch/hello.ts'], /unknown option '--bogus'/],
    [['test/fixtures/launch/hello.ts'], /required option --nproc N \(or --nproc-per-node N\) not specified/],
    [['--nprocs', '16', 'test/fixtures/launch/hello.ts'], /unknown option '--nprocs'/],
    [['--nnodes', '2', '--nproc', '2', 'test/fixtures/launch/hello.ts'], /--nnodes 2 is not supported yet: Ascent runs on one node/],
    [['--node-rank', '1', '--nproc', '2', 'test/fixtures/launch/hello.ts'], /--node-rank 1 is not supported yet/],
    [['--nproc', '2', '--nproc-per-node', '4', 'test/fixtures/launch/hello.ts'], /--nproc 2 and --nproc-per-node 4 disagree/],
    [['--nproc', '2', 'README.md'], /must be a \.ts, \.mts, \.js or \.mjs file/],
    [['--nproc', '2', '--max-time', 'soon', 'test/fixtures/launch/hello.ts'], /non-negative number of seconds for --max-time/],
    [
      ['--nproc', '2', '--enable-npu-model-patch', 'yes', 'test/fixtures/launch/hello.ts'],
      /Expected true or false for --enable-npu-model-patch but received "yes"/,
    ],
    [['--nproc', '2', '--enable-npu-model-patch'], /argument missing|missing required argument/],
  ])('bad flags %j exit 2 with the error and the usage', async (args, message) => {
    const r = await runLaunch(args);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).toContain('Usage: launch --nproc N [flags] entry.(ts|mjs|js) [entry args...]');
  });

  it('torchrun spellings: --nproc-per-node, --nnodes 1, --node-rank 0, and --log-dir writes one file per rank', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ascent-logdir-'));
    const r = await runLaunch(['--nproc-per-node', '2', '--nnodes', '1', '--node-rank', '0', '--log-dir', join(dir, 'logs'), fx('hello.ts')]);
    expect(r.code).toBe(0);
    expect(readdirSync(join(dir, 'logs')).sort()).toEqual(['rank-0.log', 'rank-1.log']);
    for (const rank of [0, 1]) {
      const log = readFileSync(join(dir, 'logs', `rank-${rank}.log`), 'utf8');
      expect(log).toContain(`echo(hi from ${rank}) from 1`);
      expect(log).not.toContain('[rank');
      expect(r.stdout).toContain(`[rank ${rank}] echo(hi from ${rank}) from 1`);
    }
  });

  it("an entry's validateArgs answers --help in the launcher: the text as written, exit 0, no rank started", async () => {
    // The same entry without --help: every rank runs main and says so.
    const run = await runLaunch(['--nproc', '2', fx('help.mjs')]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain('[rank 1] rank 1 ran main');
    const help = await runLaunch(['--nproc', '2', fx('help.mjs'), '--help']);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toBe('Usage: help-fixture [--name <x>]\n');
    expect(help.stderr).toBe('');
    const bad = await runLaunch(['--nproc', '2', fx('help.mjs'), 'bad-return']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(
      /^launch: validateArgs\(\) of .*help\.mjs resolved to 42\. HINT: resolve to nothing to start the ranks, or to \{ stdout: string \}/,
    );
    expect(bad.stdout).not.toContain('ran main');
    // The sizes an entry decides placement by (one process: both are --nproc).
    const world = await runLaunch(['--nproc', '3', fx('help.mjs'), 'world']);
    expect(world.stdout).toBe('worldSize 3 localWorldSize 3\n');
  });

  it('--version prints the package version; `ascent launch` is the same command; `ascent` alone prints its help', async () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    const v = await runLaunch(['--version']);
    expect(v.code).toBe(0);
    expect(v.stdout.trim()).toBe(pkg.version);
    const sub = await runBin('ascent.mjs', ['launch', '--nproc', '1', fx('hello.ts')]);
    expect(sub.code).toBe(0);
    expect(sub.stdout).toContain('[rank 0] echo(hi from 0) from 0');
    const bad = await runBin('ascent.mjs', ['launch', '--nprocs', '1', fx('hello.ts')]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("unknown option '--nprocs'");
    const help = await runBin('ascent.mjs', []);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/Usage: ascent/);
    expect(help.stdout).toMatch(/launch\s+run an SPMD entry on N ranks/);
  });

  it('the launcher owns the terminal: rank 0 renders live in a pseudo-terminal, plain lines otherwise', async () => {
    // util-linux `script` runs launch on a pseudo-terminal 100 columns wide.
    const cmd = `stty cols 100; exec ${JSON.stringify(process.execPath)} bin/launch.mjs --nproc 2 ${fx('live.mjs')}`;
    const tty = await new Promise<Run>((resolve) => {
      const child = spawn('script', ['-qfec', cmd, '/dev/null'], { cwd: ROOT, env: { ...process.env, ASCENT_DEVICE_MEMORY: '64MiB' } });
      let stdout = '';
      child.stdout.on('data', (d) => (stdout += d));
      const guard = setTimeout(() => child.kill('SIGKILL'), 45_000);
      child.on('close', (code, signal) => {
        clearTimeout(guard);
        resolve({ code, signal, stdout, stderr: '' });
      });
    });
    expect(tty.code).toBe(0);
    // Redrawn in place (carriage returns, no rank prefix inside the line), at the terminal's width.
    expect(tty.stdout).toContain('\rprogress 1/3 (100 columns)\rprogress 2/3 (100 columns)\rprogress 3/3 (100 columns)');
    const plain = await runLaunch(['--nproc', '2', fx('live.mjs')]);
    expect(plain.code).toBe(0);
    expect(plain.stderr).toBe('[rank 0] progress 1/3 (plain)\n[rank 0] progress 2/3 (plain)\n[rank 0] progress 3/3 (plain)\n');
  });

  it('--enable-npu-model-patch false switches model patches off on every rank', async () => {
    const off = await runLaunch(['--nproc', '2', '--enable-npu-model-patch', 'false', fx('patches.mjs')]);
    expect(off.code).toBe(0);
    expect(off.stdout).toContain('[rank 0] patches enabled: false');
    expect(off.stdout).toContain('[rank 1] patches enabled: false');
    const on = await runLaunch(['--nproc', '1', fx('patches.mjs')]);
    expect(on.stdout).toContain('[rank 0] patches enabled: true');
  });

  it('an entry without main(ctx) is a usage error: exit 2, reported once', async () => {
    const r = await runLaunch(['--nproc', '2', fx('no-main.mjs')]);
    expect(r.code).toBe(2);
    expect(r.stderr.match(/exports no main\(ctx\) function \(it exports: notMain\)/g)).toHaveLength(1);
    expect(r.stderr).toContain('(on all 2 ranks)');
  });

  it('a ConfigError on every rank is one line naming the field, without stack frames, exit 2', async () => {
    const r = await runLaunch(['--nproc', '16', fx('config-error.mjs')]);
    expect(r.code).toBe(2);
    const lines = r.stderr.split('\n').filter((l) => l.includes('steps: expected a positive integer'));
    expect(lines).toEqual(['launch: GRPO config: steps: expected a positive integer but received -3. HINT: pass --steps N with N >= 1. (on all 16 ranks)']);
    expect(r.stderr).not.toMatch(/^\s+at /m);
    expect(r.stderr).not.toContain('FAILED');
  });

  it("a ConfigError on rank 0 alone (the others stopped) is reported once as rank 0's, exit 2", async () => {
    const r = await runLaunch(['--nproc', '4', fx('config-error.mjs'), 'rank0']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain('launch: GRPO config: steps: expected a positive integer but received -3. HINT: pass --steps N with N >= 1. (on rank 0)');
    expect(r.stderr.match(/steps: expected/g)).toHaveLength(1);
  });

  it.each([
    [{ HCCL_EXEC_TIMEOUT: 'abc' }, 'Expected a positive integer for HCCL_EXEC_TIMEOUT but received "abc"'],
    [{ HCCL_EXEC_TIMEOUT: '0' }, 'Expected a positive integer for HCCL_EXEC_TIMEOUT but received "0"'],
    [{ HCCL_CONNECT_TIMEOUT: 'abc' }, 'Expected a positive integer for HCCL_CONNECT_TIMEOUT but received "abc"'],
    [{ ASCENT_DEVICE_MEMORY: 'lots' }, 'Expected a byte size like 512MiB or 16GiB for ASCENT_DEVICE_MEMORY but received "lots"'],
    [{ ASCENT_ACTOR_CALLSITES: 'maybe' }, 'Expected true/false (or 1/0) for ASCENT_ACTOR_CALLSITES but received "maybe"'],
  ])('a bad environment value %j is one line naming the variable, exit 2', async (env, message) => {
    const r = await runLaunch(['--nproc', '2', fx('hello.ts')], { env });
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(`launch: ${message}`);
  });

  it('every rank runs its own catch / finally before it is stopped, and all 16 failures are counted', async () => {
    const r = await runLaunch(['--nproc', '16', '--grace-period', '10', fx('finally.mjs')]);
    expect(r.code).toBe(1);
    for (let rank = 0; rank < 16; rank++) expect(r.stdout).toContain(`[rank ${rank}] finally ran on rank ${rank}`);
    expect(r.stderr).toContain('FAILED: all 16 ranks failed (culprit: rank 0,');
    // The 15 aborted collectives are one report, not 15.
    expect(r.stderr).toMatch(
      /ranks \[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15\] failed with (the same error|a CommAbortedError) \(as on rank \d+\): CommAbortedError/,
    );
    expect(r.stderr.match(/: CommAbortedError/g)).toHaveLength(1);
  });

  it('a rank that does not stop within the grace period is reported as hung and terminated', async () => {
    const r = await runLaunch(['--nproc', '3', '--grace-period', '0.5', fx('ignores-stop.mjs')]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('[launch] rank 1 hung: it did not stop within the grace period of 500 ms and was terminated');
    expect(r.stderr).toContain('FAILED: 1 of 3 ranks failed (culprit: rank 0,');
  });
});

describe('TS entries: the package is loaded before tsx only when the entry imports values from it', () => {
  it('finds value imports and re-exports of ascent and ascent/internal, not type-only ones or other packages', () => {
    expect(packageValueImports(readFileSync(join(ROOT, 'examples', 'grpo.ts'), 'utf8'))).toEqual(['ascent']);
    expect(packageValueImports(readFileSync(join(ROOT, fx('hello.ts')), 'utf8'))).toEqual([]);
    const src = [
      "import type { RankContext } from 'ascent';",
      "import {\n  Tensor,\n  type Device,\n} from 'ascent/internal';",
      "import { z } from 'zod'; export { launch } from 'ascent';",
      "import * as all from 'ascent/internal';",
      "import { x } from './ascent.js';",
    ].join('\n');
    expect(packageValueImports(src)).toEqual(['ascent/internal', 'ascent']);
    expect(packageValueImports("import type { A } from 'ascent';\nimport type { B } from 'ascent/internal';\n")).toEqual([]);
  });
});
