/**
 * The error taxonomy: InvalidStateError for calls made in the wrong state (not set up,
 * released, asleep, busy), InternalError (with a HINT that it is a bug) for broken internal
 * invariants; both keep their class and code across a thread boundary; option checks
 * suggest the nearest valid name.
 */
import { describe, expect, it } from 'vitest';
import { InternalError, InvalidArgumentError, InvalidStateError, AscentError } from '../src/runtime/errors.js';
import { decodeError, encodeError, fromWireError } from '../src/runtime/actor-system/error-wire.js';
import { didYouMean } from '../src/runtime/device/options.js';
import { Device } from '../src/runtime/device/device.js';
import { Tensor } from '../src/runtime/device/tensor.js';
import { RolloutEngine } from '../src/rollout/engine.js';
import { loadModelConfig } from '../src/model/config.js';
import { initialParams } from '../src/model/params.js';

describe('error taxonomy', () => {
  it('codes, the bug HINT of InternalError, and classes kept across the wire', () => {
    const s = new InvalidStateError('engine asleep. HINT: wake() first.');
    const i = new InternalError('megatron-hf: no local mapping for x');
    expect([s.code, i.code]).toEqual(['ASCENT_INVALID_STATE', 'ASCENT_INTERNAL']);
    expect(i.message).toMatch(/no local mapping for x HINT: this is a bug in Ascent, not in your program; please report it/);
    expect(new InternalError('already hinted. HINT: x').message).toBe('already hinted. HINT: x');
    for (const e of [s, i]) {
      const back = fromWireError(decodeError(encodeError(e)), { rank: 3 });
      expect(back).toBeInstanceOf(e.constructor as typeof AscentError);
      expect(back.code).toBe(e.code);
      expect(back.message).toBe(e.message);
    }
    expect(s).not.toBeInstanceOf(InvalidArgumentError);
  });

  it('state errors: a released tensor, an asleep or busy engine', async () => {
    const d = Device.get(0);
    const t = Tensor.empty(d, [2]);
    t.release();
    expect(() => t.checkLive('t')).toThrow(InvalidStateError);
    const cfg = loadModelConfig(new URL('../examples/models/tiny-dense/config.json', import.meta.url).pathname);
    const e = RolloutEngine.create(cfg, { device: d });
    const reload = e.beginReload();
    reload.load(initialParams(cfg, 1));
    reload.finish();
    const busy = e.generate([[1, 5, 6]], { maxTokens: 2 });
    expect(() => e.computeLogprobs([[1, 5, 6]], { temperature: 1 })).toThrow(InvalidStateError);
    await busy;
    await e.sleep(1);
    // Refused at once, before anything is enqueued.
    expect(() => e.generate([[1, 5, 6]], { maxTokens: 2 })).toThrow(InvalidStateError);
    expect(() => e.generate([[1, 5, 6]], { maxTokens: 2 })).toThrow(/asleep \(level 1\)\. HINT: call wake\(\) first/);
  });

  it('nearest-name suggestions', () => {
    expect(didYouMean('bucketByte', ['bucketBytes', 'adapterOnly', 'verify'])).toBe(" Did you mean 'bucketBytes'?");
    expect(didYouMean('verfiy', ['bucketBytes', 'adapterOnly', 'verify'])).toBe(" Did you mean 'verify'?");
    expect(didYouMean('qqqqqqqq', ['bucketBytes', 'verify'])).toBe('');
  });
});
