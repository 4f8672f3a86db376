import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const launch = (args: string[]) =>
  spawnSync(process.execPath, ['bin/launch.mjs', ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...process.env, ASCENT_DEVICE_MEMORY: '256MiB' },
  });

describe('the README quickstart', () => {
  it('trains data-parallel under launch: the mean loss falls and every replica ends identical', () => {
    const r = launch(['--nproc', '4', '--max-time', '100', 'examples/quickstart.ts', '--steps', '12']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const m = /done: loss ([\d.]+) -> ([\d.]+) .* all 4 replicas identical/.exec(r.stdout);
    expect(m, r.stdout).not.toBeNull();
    expect(Number(m![2])).toBeLessThan(Number(m![1]));
  });

  it('a bad flag of the example is a clear failure', () => {
    const r = launch(['--nproc', '1', 'examples/quickstart.ts', '--model', 'gpt']);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('--model must be dense or moe, got gpt');
  });
});

describe('two copies of the runtime in one thread', () => {
  it('are refused with a message naming both, instead of a silent hang', () => {
    const r = launch(['--nproc', '1', '--max-time', '60', 'test/fixtures/launch/two-copies.ts']);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/Ascent's runtime is loaded twice in this thread: .*dist\/src\/runtime\/native\.js and .*src\/runtime\/native\.ts/);
    expect(r.stderr).toContain('import Ascent from one place only');
  });
});
