// The trainer actor finds its loss by name (src/train/loss-registry.ts); importing src/grpo registers 'grpo'.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../src/runtime/errors.js';
import { lossByName, registeredLosses, registerLoss, type LossBuilder } from '../src/train/loss-registry.js';

describe('loss registry', () => {
  it('an unknown name throws a clear error naming the registered losses', () => {
    registerLoss('test-a', () => async () => {
      throw new Error('unused');
    });
    expect(() => lossByName('nope')).toThrow(InvalidArgumentError);
    expect(() => lossByName('nope')).toThrow(/No loss is registered as 'nope'.*registered: .*test-a.*HINT/);
  });

  it('returns the registered builder; a different builder under a taken name is refused', () => {
    const build: LossBuilder = () => async () => {
      throw new Error('unused');
    };
    registerLoss('test-b', build);
    registerLoss('test-b', build);
    expect(lossByName('test-b')).toBe(build);
    expect(() =>
      registerLoss('test-b', () => async () => {
        throw new Error('other');
      }),
    ).toThrow(/already registered as 'test-b'/);
    expect(() => registerLoss('', build)).toThrow(InvalidArgumentError);
  });

  it("importing src/grpo registers the GRPO loss as 'grpo'", async () => {
    expect(registeredLosses()).not.toContain('grpo');
    const { grpoLoss } = await import('../src/grpo/loss.js');
    expect(lossByName('grpo')).toBe(grpoLoss);
  });
});
