/**
 * The rollout engine against the trainer's model (Qwen3Model on one device, same HF
 * parameters): prefill logits, log-probs of given sequences, greedy generation against a
 * full-forward greedy decode, seeded sampling reproducible — in-process at tp = 1 and on
 * real worker ranks under launch at tp = 2 and 4 (test/fixtures/rollout/engine-tp.mjs),
 * both tiny-dense and tiny-moe.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { initialParams } from '../src/model/params.js';
import { RolloutEngine } from '../src/rollout/index.js';
import { EOS } from '../src/data/synthetic-task.js';
import { cfgOf, expectedChecksums, maxRelErr, prompts, Reference } from './helpers/rollout-reference.js';
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
    const reload = engine.beginReload();
    reload.load(initialParams(cfg, SEED));
    reload.finish();
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

  it('a row stops after its EOS token (included), the others run to maxTokens', async () => {
    const ps = prompts(3, 11);
    const full = await engine.generate(ps, { maxTokens: 6, temperature: 0 });
    // Use row 0's third greedy token as the stop token: row 0 must stop there.
    const stop = full.tokens[0]![2]!;
    const r = await engine.generate(ps, { maxTokens: 6, temperature: 0, eosTokenId: stop });
    for (let b = 0; b < ps.length; b++) {
      const at = full.tokens[b]!.indexOf(stop);
      expect(r.tokens[b]).toEqual(at < 0 ? full.tokens[b] : full.tokens[b]!.slice(0, at + 1));
      expect(r.finishReasons[b]).toBe(at < 0 ? 'length' : 'eos');
    }
    expect(r.finishReasons[0]).toBe('eos');
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

type Gen = { tokens: number[][]; logprobs: number[][]; finishReasons: string[] };
type TpResult = {
  rank: number;
  logits: number[][];
  logprobs: number[][];
  greedy: Gen;
  sampled: Gen;
  checksums: Record<string, { layout: string; checksum: string }>;
};

// Each case varies how the weights arrive: expert layout and host vs device source.
const TP_CASES = [
  { which: 'dense', tp: 2, layout: 'fused', source: 'device' },
  { which: 'dense', tp: 4, layout: 'fused', source: 'host' },
  { which: 'moe', tp: 2, layout: 'fused', source: 'device' },
  { which: 'moe', tp: 4, layout: 'per-expert', source: 'host' },
] as const;

describe('rollout engine on real tensor-parallel ranks (launch)', () => {
  beforeAll(() => ensureParallelBuilt(), 120_000);

  it.each(TP_CASES)(
    'tiny $which, tp = $tp, $layout experts from $source: equals Qwen3Model and the tp = 1 engine',
    async ({ which, tp, layout, source }) => {
      const cfg = cfgOf(which);
      const run = await launchFixture(tp, 'test/fixtures/rollout/engine-tp.mjs', [which, layout, source]);
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      const results = run.results as unknown as TpResult[];
      expect(results.map((r) => r.rank)).toEqual(Array.from({ length: tp }, (_, i) => i));

      const host = initialParams(cfg, SEED);
      const ref = new Reference(cfg, host);
      const single = RolloutEngine.create(cfg, { device: Device.get(0) });
      try {
        const singleReload = single.beginReload();
        singleReload.load(host);
        singleReload.finish();
        const wantSampled = await single.generate(prompts(4, 13), SAMPLING);
        const wantLogits = await Promise.all(prompts(4, 5).map((p) => ref.logits(p)));
        const seqs = prompts(3, 9).map((p, i) => [...p, 4 + i, 5, EOS]);
        const wantLp = await Promise.all(seqs.map((s) => ref.logprobs(s, 0.7)));
        const wantGreedy = await Promise.all(prompts(4, 11).map((p) => ref.greedy(p, 6)));
        for (const r of results) {
          // Every local packed tensor is the host packing of this rank's slice.
          const want = expectedChecksums(cfg, host, tp, r.rank);
          expect(Object.keys(r.checksums).sort()).toEqual(Object.keys(want).sort());
          for (const [n, c] of Object.entries(r.checksums)) {
            expect(c.layout, n).toBe('processed');
            expect(c.checksum, n).toBe(want[n]);
          }
          for (let b = 0; b < wantLogits.length; b++) expect(maxRelErr(r.logits[b]!, wantLogits[b]!)).toBeLessThan(1e-4);
          for (let b = 0; b < seqs.length; b++)
            for (let t = 0; t < wantLp[b]!.length; t++) expect(Math.abs(r.logprobs[b]![t]! - wantLp[b]![t]!)).toBeLessThan(1e-4);
          expect(r.greedy.tokens).toEqual(wantGreedy);
          expect(r.sampled.tokens).toEqual(wantSampled.tokens);
          for (let b = 0; b < 4; b++)
            for (let t = 0; t < wantSampled.logprobs[b]!.length; t++)
              expect(Math.abs(r.sampled.logprobs[b]![t]! - wantSampled.logprobs[b]![t]!)).toBeLessThan(1e-4);
          // Tokens and log-probs come from tp rank 0: identical on every rank.
          expect(r.sampled).toEqual(results[0]!.sampled);
          expect(r.greedy).toEqual(results[0]!.greedy);
        }
      } finally {
        single.release();
        ref.release();
      }
    },
    60_000,
  );
});
