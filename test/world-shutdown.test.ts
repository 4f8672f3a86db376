import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

describe('World.shutdown', () => {
  it('leaves no thread or handle behind, so the process exits on its own', () => {
    const script = fileURLToPath(new URL('./fixtures/world-exit.mjs', import.meta.url));
    // The kill timeout only turns a hang into a failure; it asserts nothing about speed.
    const r = spawnSync(process.execPath, [script], { encoding: 'utf8', timeout: 45_000, env: { ...process.env, ASCENT_DEVICE_MEMORY: '64MiB' } });
    expect(r.signal).toBeNull();
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
    expect(out.res).toEqual([2, 2, 2, 2]);
    expect(out.sq).toBe(49);
    expect(out.left).toEqual([]);
  });
});
