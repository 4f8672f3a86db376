/**
 * Stream ops per decoded token of the rollout engine on the quickstart's tiny dense model
 * (2 layers). At this size every op costs mostly its dispatch, so the count is the engine's
 * CPU per token: the fused q/k/v path (one matmul over the whole qkv_proj, one qkvNormRope)
 * and the fused residual add + RMSNorm (addRmsNorm) (which also does the KV cache write) take a
 * layer from 16 ops to 9 (42 ops per step before, 26 after); K.decodeLayer then runs those 9
 * as one op (10 per step). Counted as the difference of two greedy generations (6 and 2 tokens,
 * no EOS) over 4 decode steps.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import type { Stream } from '../src/runtime/device/stream.js';
import { initialParams } from '../src/model/params.js';
import { RolloutEngine } from '../src/rollout/index.js';
import { cfgOf, prompts } from './helpers/rollout-reference.js';

describe('rollout engine ops per decoded token (tiny dense, tp = 1)', () => {
  const cfg = cfgOf('dense');
  let stream: Stream;
  let engine: RolloutEngine;

  beforeAll(() => {
    stream = Device.get(0).newStream();
    engine = RolloutEngine.create(cfg, { device: Device.get(0), stream });
    const reload = engine.beginReload();
    reload.load(initialParams(cfg, 7));
    reload.finish();
  });
  afterAll(() => {
    engine?.release();
    stream?.destroy();
  });

  // A stop token greedy decoding never produces, so every row runs to maxTokens.
  let eosTokenId = -1;
  const opsOf = async (maxTokens: number): Promise<number> => {
    const before = stream.stats().enqueued;
    const r = await engine.generate(prompts(3, 11), { maxTokens, temperature: 0, eosTokenId });
    for (const t of r.tokens) expect(t).toHaveLength(maxTokens);
    return stream.stats().enqueued - before;
  };

  it('a decode step enqueues one op per layer plus 8 (embedding, first norm, head, sampling, uploads)', async () => {
    const seen = new Set((await engine.generate(prompts(3, 11), { maxTokens: 6, temperature: 0 })).tokens.flat());
    eosTokenId = Array.from({ length: cfg.vocabSize }, (_, i) => i).find((i) => !seen.has(i))!;
    await opsOf(2); // warm-up: first-use uploads are not part of a step
    const perStep = ((await opsOf(6)) - (await opsOf(2))) / 4;
    expect(Number.isInteger(perStep)).toBe(true);
    // Unfused, a layer took 16 ops (norm, 3 matmuls, 2 x (norm, rope), KV write, attention, o_proj, add, norm,
    // gate_up, swiglu, down, add); fused it takes 9: qkv matmul, qkvNormRope (with the KV write), attention, o_proj,
    // addRmsNorm, gate_up, swiglu, down, addRmsNorm (with the next layer's input norm, or the final norm);
    // K.decodeLayer runs those 9 as one op.
    // Outside the layers: embedding, the first input norm, LM head, sample, log-probs, their copy, the
    // token read-back and the positions / lengths upload.
    expect(perStep).toBe(cfg.numLayers + 8);
  });
});
