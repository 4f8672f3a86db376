import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, InvalidArgumentError } from '../src/internal.js';
import { modelPatchesEnabled, parsePatchSwitch, patchImpl, registerPatch, setModelPatchesEnabled } from '../src/runtime/patches.js';

describe('model patch switch', () => {
  afterEach(() => {
    setModelPatchesEnabled(undefined);
    delete process.env.ASCENT_ENABLE_NPU_MODEL_PATCH;
  });

  it('requires true or false', () => {
    expect(parsePatchSwitch('true', 'x')).toBe(true);
    expect(parsePatchSwitch(' FALSE ', 'x')).toBe(false);
    expect(() => parsePatchSwitch('', '--enable-npu-model-patch')).toThrow(/needs a value: true or false/);
    expect(() => parsePatchSwitch('1', '--enable-npu-model-patch')).toThrow(ConfigError);
  });

  it('follows the environment (read once per thread), and a bad value is an error, not a default', () => {
    registerPatch({ name: 'test.patch', families: ['qwen3'], description: 'test' });
    setModelPatchesEnabled(undefined);
    expect(patchImpl('test.patch')).toBe('fast');
    process.env.ASCENT_ENABLE_NPU_MODEL_PATCH = 'false';
    // The thread read the switch already: a later change is seen once it reads again.
    expect(patchImpl('test.patch')).toBe('fast');
    setModelPatchesEnabled(undefined);
    expect(patchImpl('test.patch')).toBe('reference');
    process.env.ASCENT_ENABLE_NPU_MODEL_PATCH = 'off';
    setModelPatchesEnabled(undefined);
    expect(() => modelPatchesEnabled()).toThrow(/Expected true or false for ASCENT_ENABLE_NPU_MODEL_PATCH but received "off"/);
    setModelPatchesEnabled(true);
    expect(patchImpl('test.patch')).toBe('fast');
    expect(() => patchImpl('nope')).toThrow(InvalidArgumentError);
  });
});
