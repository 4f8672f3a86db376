/**
 * generate() collects each step's log-probs on the device and reads them once at the end:
 * rows that stop at different steps still get exactly the log-probs of their own tokens (as
 * many as tokens, and the same bits as the steps of a run that does not stop them).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { initialParams } from '../src/model/params.js';
import { RolloutEngine } from '../src/rollout/index.js';
import { cfgOf, prompts } from './helpers/rollout-reference.js';

describe('generate() log-probs read once per call', () => {
  const cfg = cfgOf('dense');
  let engine: RolloutEngine;

  beforeAll(() => {
    engine = RolloutEngine.create(cfg, { device: Device.get(0) });
    const reload = engine.beginReload();
    reload.load(initialParams(cfg, 3));
    reload.finish();
  });
  afterAll(() => engine?.release());

  it.each([0, 0.9])('rows stopped at different steps keep their own steps’ log-probs (temperature %s)', async (temperature) => {
    const ps = prompts(5, 17);
    const sp = { maxTokens: 9, temperature, seed: 21 };
    const full = await engine.generate(ps, sp);
    // Stop on row 0's fourth token: it ends at step 3, rows without that token run on.
    const stop = full.tokens[0]![3]!;
    const r = await engine.generate(ps, { ...sp, eosTokenId: stop });
    const ends = r.tokens.map((t) => t.length);
    expect(ends[0]).toBeLessThanOrEqual(4);
    expect(new Set(ends).size, `rows end at different steps: ${ends.join(', ')}`).toBeGreaterThan(1);
    for (let b = 0; b < ps.length; b++) {
      expect(r.tokens[b]).toEqual(full.tokens[b]!.slice(0, ends[b]));
      expect(r.logprobs[b]).toEqual(full.logprobs[b]!.slice(0, ends[b]));
      expect(r.logprobs[b]!.every((x) => Number.isFinite(x) && x <= 0)).toBe(true);
    }
    // And each is its own token's: scoring prompt + tokens gives them back (within the
    // prefill-vs-decode rounding), so a read that mixed up steps and rows fails here.
    const seqs = ps.map((p, b) => [...p, ...r.tokens[b]!]);
    const scored = await engine.computeLogprobs(seqs, { temperature: temperature || 1 });
    for (let b = 0; b < ps.length; b++) {
      const want = scored[b]!.slice(ps[b]!.length - 1);
      expect(want.length).toBe(ends[b]);
      for (let t = 0; t < want.length; t++) expect(Math.abs(r.logprobs[b]![t]! - want[t]!), `row ${b} step ${t}`).toBeLessThan(1e-4);
    }
  });
});
