import { execSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ENV_VARS, parseBytes } from '../src/internal.js';
import { applyRuntimeEnvDefaults, envBool, envInt, validateEnv } from '../src/runtime/env.js';

describe('environment variables', () => {
  it('every variable the runtime reads is documented in the README with its default', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    for (const v of ENV_VARS) {
      expect(readme, v.name).toContain(`\`${v.name}\``);
      if (v.default !== undefined) {
        const row = readme.split('\n').find((l) => l.includes(`\`${v.name}\``) && l.startsWith('|'));
        expect(row, v.name).toContain(`\`${v.default}\``);
      }
    }
  });

  it('no source file reads a tunable from process.env outside env.ts', () => {
    // RANK etc. are written (not read) by the runtime; reads go through env.ts.
    const hits = execSync("grep -rn 'process\\.env\\.[A-Z_]*' src --include=*.ts || true", { encoding: 'utf8', cwd: new URL('..', import.meta.url) })
      .split('\n')
      .filter((l) => l && !l.startsWith('src/runtime/env.ts'));
    expect(hits).toEqual([]);
  });

  it('HCCL_CONNECT_TIMEOUT defaults to 120 when unset, and is kept when set', () => {
    const env: NodeJS.ProcessEnv = {};
    applyRuntimeEnvDefaults(env);
    expect(env.HCCL_CONNECT_TIMEOUT).toBe('120');
    const set: NodeJS.ProcessEnv = { HCCL_CONNECT_TIMEOUT: '30' };
    applyRuntimeEnvDefaults(set);
    expect(set.HCCL_CONNECT_TIMEOUT).toBe('30');
  });

  it('validateEnv checks every set variable up front and names the bad one', () => {
    expect(() => validateEnv({ HCCL_EXEC_TIMEOUT: '30', ASCENT_DEVICE_MEMORY: '64MiB', ASCENT_LOG_PREFIX: 'true' })).not.toThrow();
    expect(() => validateEnv({ HCCL_CONNECT_TIMEOUT: 'abc' })).toThrow(/HCCL_CONNECT_TIMEOUT but received "abc"/);
    expect(() => validateEnv({ ASCENT_DEVICE_MEMORY: 'lots' })).toThrow(/for ASCENT_DEVICE_MEMORY but received "lots"/);
    expect(() => validateEnv({ ASCENT_DEVICE_MEMORY: '0' })).toThrow(/at least 1 for ASCENT_DEVICE_MEMORY/);
    expect(() => validateEnv({ ASCENT_ACTOR_CALLSITES: 'maybe' })).toThrow(/ASCENT_ACTOR_CALLSITES/);
    // Set per rank by the runtime: not the user's to get wrong.
    expect(() => validateEnv({ RANK: 'x' })).not.toThrow();
  });

  it('bad values are clear errors', () => {
    expect(() => envInt('HCCL_EXEC_TIMEOUT', { HCCL_EXEC_TIMEOUT: 'soon' })).toThrow(/Expected a positive integer for HCCL_EXEC_TIMEOUT but received "soon"/);
    expect(() => envInt('HCCL_EXEC_TIMEOUT', { HCCL_EXEC_TIMEOUT: '0' })).toThrow(/Expected a positive integer for HCCL_EXEC_TIMEOUT but received "0"/);
    expect(envInt('ASCENT_ACTOR_CALL_TIMEOUT_MS', { ASCENT_ACTOR_CALL_TIMEOUT_MS: '0' })).toBe(0);
    expect(() => envBool('ASCENT_LOG_PREFIX', { ASCENT_LOG_PREFIX: 'maybe' })).toThrow(/Expected true\/false/);
    expect(parseBytes('512MiB')).toBe(512 * 1024 * 1024);
    expect(parseBytes('1.5GiB')).toBe(1.5 * 1024 ** 3);
    expect(() => parseBytes('lots')).toThrow(/byte size like 512MiB/);
  });
});
