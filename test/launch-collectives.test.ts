import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

function run(bin: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(ROOT, 'bin', bin), ...args], { cwd: ROOT, env: { ...process.env, ASCENT_DEVICE_MEMORY: '64MiB', ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    // Only turns a hang into a failure.
    const guard = setTimeout(() => child.kill('SIGKILL'), 45_000);
    child.on('close', (code) => {
      clearTimeout(guard);
      resolve({ code, stdout, stderr });
    });
  });
}

const FAULTS = 'test/fixtures/launch/comm-faults.mjs';

describe('collectives under launch', () => {
  it('the world communicator is ready in ctx.comm on every rank', async () => {
    const r = await run('launch.mjs', ['--nproc', '8', FAULTS, 'ok']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect((r.stdout.match(/second collective done/g) ?? []).length).toBe(8);
  });

  it('a rank that skips a collective: the others time out with a report, launch exits 1, and `ascent trace` explains the dump', async () => {
    const traceDir = mkdtempSync(join(tmpdir(), 'ascent-trace-test-'));
    const r = await run('launch.mjs', ['--nproc', '4', '--grace-period', '1', FAULTS, 'skip'], { HCCL_EXEC_TIMEOUT: '2', ASCENT_TRACE_DIR: traceDir });
    expect(r.code).toBe(1);
    // One report for the three ranks that timed out, and the rank that skipped is the culprit.
    expect(r.stderr).toMatch(
      /\[launch\] ranks \[0, 1, 2\] failed with (the same error|a CollectiveTimeoutError) \(as on rank [0-2]\): CollectiveTimeoutError: /,
    );
    expect(r.stderr.match(/: CollectiveTimeoutError/g)).toHaveLength(1);
    expect(r.stderr).toContain('(culprit: rank 3,');
    expect(r.stderr).toContain('seq 2');
    expect(r.stderr).toMatch(/missing.*\b3\b/);
    expect(readdirSync(traceDir).filter((f) => f.endsWith('.json')).length).toBeGreaterThan(0);

    const t = await run('ascent.mjs', ['trace', traceDir]);
    expect(t.code).toBe(0);
    expect(t.stdout).toContain('ASCENT_COLLECTIVE_TIMEOUT');
    expect(t.stdout).toMatch(/seq 2: rank 3 never called allReduce\(fp32, count=2, op=sum\)/);
  });

  it.each([
    ['splitmiss', { HCCL_CONNECT_TIMEOUT: '2' }, 3],
    ['nosend', { HCCL_EXEC_TIMEOUT: '2' }, 2],
    ['spin', { HCCL_EXEC_TIMEOUT: '2' }, 3],
  ] as const)('timeout case %s: the FAILED line names the rank at fault, not a waiting one', async (mode, env, culprit) => {
    const r = await run('launch.mjs', ['--nproc', '4', '--grace-period', '1', FAULTS, mode], env);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`FAILED: .*\\(culprit: rank ${culprit},`));
    if (mode === 'spin') expect(r.stderr).toMatch(/rank 3 hung/);
  });

  it('two ranks calling different ops at the same step fail with the mismatch named', async () => {
    const traceDir = mkdtempSync(join(tmpdir(), 'ascent-trace-test-'));
    const r = await run('launch.mjs', ['--nproc', '4', '--grace-period', '1', FAULTS, 'mismatch'], { ASCENT_TRACE_DIR: traceDir });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('CollectiveMismatchError');
    expect(r.stderr).toMatch(/broadcast/);
    expect(r.stderr).toMatch(/\[launch\] all 4 ranks failed with (the same error|a CollectiveMismatchError)/);
    // Needs details.culpritWorldRanks on CollectiveMismatchError (the comm branch); without it
    // every rank's error is the same and the culprit cannot be told from the victims.
    expect(r.stderr).toContain('(culprit: rank 2,');
    const t = await run('ascent.mjs', ['trace', traceDir]);
    expect(t.stdout).toMatch(
      /seq 2: fingerprints differ: ranks \[0, 1, 3\] called allReduce\(fp32, count=2, op=sum\); rank 2 called broadcast\(fp32, count=2, root=0\)/,
    );
  });

  it('a rank that exits mid-collective fails the run at once, naming it', async () => {
    const r = await run('launch.mjs', ['--nproc', '4', '--grace-period', '1', FAULTS, 'exit'], { HCCL_EXEC_TIMEOUT: '600' });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('[launch] rank 1 exited with code 3');
    // The peers' aborted collectives name rank 1 as the cause; the summary names it as the root.
    expect(r.stderr).toMatch(
      /ranks \[0, 2, 3\] failed with (the same error|a CommAbortedError) \(as on rank [023]\): CommAbortedError: .*Cause: rank 1's worker exited/,
    );
    expect(r.stderr).toContain('FAILED: all 4 ranks failed (culprit: rank 1, exited with code 3');
  });

  it('a rank that calls process.exit(0) mid-collective is named as the culprit, not a victim', async () => {
    const r = await run('launch.mjs', ['--nproc', '4', '--grace-period', '1', FAULTS, 'exit0'], { HCCL_EXEC_TIMEOUT: '600' });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('FAILED: 3 of 4 ranks failed (culprit: rank 1, exited while the others waited in a collective');
  });

  it('`ascent trace` on a folder without dumps is a clear error', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'ascent-trace-empty-'));
    const t = await run('ascent.mjs', ['trace', empty]);
    expect(t.code).toBe(1);
    expect(t.stderr).toContain('No flight-recorder dumps (*.json) in');
  });
});
