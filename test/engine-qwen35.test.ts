/**
 * The rollout engine on Qwen3.5 (dense `qwen3_5` and `qwen3_5_moe`, tp 1): its log-probs equal
 * the single strategy's (src/train/logprobs.ts) on the same weights; greedy generation through
 * the KV cache and the Gated DeltaNet state cache equals recomputing the whole sequence by
 * prefill every step; a ragged batch (right-padded, rows shorter than the conv window
 * included) generates what each prompt generates alone; sleep / wake (both levels) leaves
 * generation unchanged; a full reload (fused or per-expert experts) holds exactly the HF
 * bytes packed on the host. Above tp 1: test/engine-qwen35-tp.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { RolloutEngine, runtimeChecksum } from '../src/rollout/index.js';
import { convertExpertLayout, fromHostTensors, toHostTensors } from '../src/model/params.js';
import type { HostParam } from '../src/model/param-store.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import { rowLogprobs } from '../src/train/logprobs.js';
import { probeBatch } from '../src/sync/verify.js';
import { argmaxRow, QWEN35, qwen35Prompts, spreadParams } from './helpers/qwen35-engine.js';

const device = Device.get(0);
const SEED = 7;
// Lengths 1 and 2 are shorter than the conv window (K - 1 = 3): their conv state is zero-padded.
const LENGTHS = [5, 1, 9, 2, 7];
// Prompts avoid id 0; a row that generates it stops there.
const EOS = 0;

describe.each(['dense', 'moe'] as const)('rollout engine, qwen3.5 %s, tp 1', (which) => {
  const cfg = QWEN35[which];
  const V = cfg.vocabSize;
  const host = spreadParams(cfg, SEED);
  let engine: RolloutEngine;

  beforeAll(() => {
    engine = RolloutEngine.create(cfg, { device, maxBatch: 8, maxSeqLen: 48 });
    const reload = engine.beginReload();
    expect(reload.load(host)).toBe(host.size);
    reload.finish();
  });
  afterAll(() => engine?.release());

  it('computeLogprobs equals the single strategy’s token log-probs within 1e-4 (temperature 1 and 0.7)', async () => {
    const s = SingleDeviceStrategy.create(cfg, device, spreadParams(cfg, SEED));
    try {
      const seqs = qwen35Prompts([12, 4, 9], V, 11);
      const batch = probeBatch(seqs);
      for (const temperature of [1, 0.7]) {
        const want = await rowLogprobs(s, batch, temperature);
        const got = await engine.computeLogprobs(seqs, { temperature });
        let worst = 0;
        seqs.forEach((r, b) => {
          expect(got[b]!.length).toBe(r.length - 1);
          for (let t = 0; t + 1 < r.length; t++) worst = Math.max(worst, Math.abs(got[b]![t]! - want.logprobs[b * batch.seqLen + t]!));
        });
        expect(worst).toBeLessThan(1e-4);
      }
      // The comparison is not vacuous: the log-probs are far from uniform.
      const lp = (await engine.computeLogprobs(seqs, { temperature: 1 })).flat();
      expect(Math.max(...lp) - Math.min(...lp)).toBeGreaterThan(1);
    } finally {
      s.release();
    }
  }, 60_000);

  it('greedy generation through the state cache equals recomputing the sequence by prefill every step', async () => {
    const ps = qwen35Prompts(LENGTHS, V);
    const N = 6;
    const r = await engine.generate(ps, { maxTokens: N, temperature: 0, eosTokenId: EOS });
    for (let b = 0; b < ps.length; b++) {
      const seq = [...ps[b]!];
      for (let step = 0; step < N && seq.at(-1) !== EOS; step++) {
        const [logits] = await engine.prefillLogits([seq]);
        seq.push(argmaxRow(logits!, seq.length - 1, V));
      }
      expect(r.tokens[b], `row ${b}`).toEqual(seq.slice(ps[b]!.length));
      // Decode log-probs equal the scoring pass's at the same positions.
      const [lp] = await engine.computeLogprobs([seq], { temperature: 1 });
      const tail = lp!.slice(ps[b]!.length - 1);
      expect(r.logprobs[b]!.length).toBe(tail.length);
      for (let t = 0; t < tail.length; t++) expect(Math.abs(r.logprobs[b]![t]! - tail[t]!)).toBeLessThan(1e-4);
    }
    // Rows do not all say the same thing (the state of one row never leaks into another).
    expect(new Set(r.tokens.map((t) => t.join(','))).size).toBeGreaterThan(1);
  }, 60_000);

  it('a ragged right-padded batch generates what each prompt generates alone', async () => {
    const ps = qwen35Prompts(LENGTHS, V, 17);
    const sampling = { maxTokens: 5, temperature: 0.9, seed: 42, eosTokenId: EOS };
    const together = await engine.generate(ps, { maxTokens: 5, temperature: 0, eosTokenId: EOS });
    for (let b = 0; b < ps.length; b++) {
      const alone = await engine.generate([ps[b]!], { maxTokens: 5, temperature: 0, eosTokenId: EOS });
      expect(together.tokens[b], `row ${b}`).toEqual(alone.tokens[0]);
      together.logprobs[b]!.forEach((x, t) => expect(Math.abs(x - alone.logprobs[0]![t]!)).toBeLessThan(1e-5));
    }
    // Sampling is per row too (seed / step / row): row 0 alone samples as row 0 of the batch.
    const a = await engine.generate(ps, sampling);
    const one = await engine.generate([ps[0]!], sampling);
    expect(one.tokens[0]).toEqual(a.tokens[0]);
  }, 60_000);

  it('sleep / wake (level 1, and level 2 with a reload) then generate gives the same tokens', async () => {
    const ps = qwen35Prompts([6, 3, 8], V, 23);
    const opts = { maxTokens: 6, temperature: 0, eosTokenId: EOS };
    const before = await engine.generate(ps, opts);
    await engine.sleep(1);
    expect(engine.deviceBytes()).toBe(0);
    engine.wake();
    expect((await engine.generate(ps, opts)).tokens).toEqual(before.tokens);
    await engine.sleep(2);
    expect(engine.deviceBytes()).toBe(0);
    engine.wake();
    expect(() => engine.generate(ps, opts)).toThrow(/dropped/);
    const reload = engine.beginReload();
    reload.load(host);
    reload.finish();
    const after = await engine.generate(ps, opts);
    expect(after.tokens).toEqual(before.tokens);
    expect(after.logprobs).toEqual(before.logprobs);
  }, 60_000);
});

/**
 * The runtime bytes a tp-1 engine should hold, packed on the host from the HF parameters
 * (independent of the loader): q ‖ k ‖ v and gate ‖ up rows, experts with their last two
 * dims swapped, everything else (the GDN tensors included) as it is.
 */
function packedOnHost(host: Map<string, HostParam>): Map<string, Float32Array> {
  const out = new Map<string, Float32Array>();
  const cat = (...names: string[]) => {
    const parts = names.map((n) => host.get(n)!.data);
    const o = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
    parts.reduce((at, p) => (o.set(p, at), at + p.length), 0);
    return o;
  };
  const swapLast = (p: HostParam) => {
    const [E, A, B] = p.shape as [number, number, number];
    const o = new Float32Array(p.data.length);
    for (let e = 0; e < E; e++) for (let a = 0; a < A; a++) for (let b = 0; b < B; b++) o[(e * B + b) * A + a] = p.data[(e * A + a) * B + b]!;
    return o;
  };
  for (const [name, p] of host) {
    let m: RegExpMatchArray | null;
    if ((m = name.match(/^(.*\.self_attn)\.q_proj\.weight$/))) out.set(`${m[1]}.qkv_proj.weight`, cat(name, `${m[1]}.k_proj.weight`, `${m[1]}.v_proj.weight`));
    else if ((m = name.match(/^(.*)\.gate_proj\.weight$/))) out.set(`${m[1]}.gate_up_proj.weight`, cat(name, `${m[1]}.up_proj.weight`));
    else if ((m = name.match(/^(.*\.experts)\.gate_up_proj$/))) out.set(`${m[1]}.w13_weight`, swapLast(p));
    else if ((m = name.match(/^(.*\.experts)\.down_proj$/))) out.set(`${m[1]}.w2_weight`, swapLast(p));
    else if (!/\.(k_proj|v_proj|up_proj)\.weight$/.test(name)) out.set(name, p.data);
  }
  return out;
}

describe.each(['dense', 'moe'] as const)('rollout engine, qwen3.5 %s: runtime layout of a full reload', (which) => {
  it('every runtime parameter holds the HF bytes packed on the host; per-expert and fused checkpoints load the same', async () => {
    const cfg = QWEN35[which];
    const host = spreadParams(cfg, 13);
    const want = packedOnHost(host);
    const engines = [RolloutEngine.create(cfg, { device, maxBatch: 2, maxSeqLen: 8 }), RolloutEngine.create(cfg, { device, maxBatch: 2, maxSeqLen: 8 })];
    try {
      const sources = [host, cfg.moe ? fromHostTensors(convertExpertLayout(toHostTensors(host), cfg, 'per-expert')) : host];
      if (cfg.moe) expect([...sources[1]!.keys()].some((n) => /\.mlp\.experts\.0\.gate_proj\.weight$/.test(n))).toBe(true);
      for (const [i, e] of engines.entries()) {
        const reload = e.beginReload();
        reload.load(sources[i]!);
        reload.finish();
        const got = await e.checksums();
        expect([...got.keys()].sort()).toEqual([...want.keys()].sort());
        for (const [name, data] of want) {
          const c = got.get(name)!;
          expect([name, c.layout, c.checksum]).toEqual([name, 'processed', runtimeChecksum(new Uint8Array(data.buffer, data.byteOffset, data.byteLength))]);
        }
      }
    } finally {
      for (const e of engines) e.release();
    }
  });
});

describe('rollout engine, qwen3.5: checkpoint names', () => {
  it('a ConditionalGeneration name (model.language_model.*) is refused with a hint to strip the prefix', () => {
    const cfg = QWEN35.dense;
    const engine = RolloutEngine.create(cfg, { device, maxBatch: 1, maxSeqLen: 8 });
    const reload = engine.beginReload();
    try {
      const emb = spreadParams(cfg, 1).get('model.embed_tokens.weight')!;
      expect(() => reload.load([['model.language_model.embed_tokens.weight', emb]])).toThrow(
        /unknown checkpoint tensor "model\.language_model\.embed_tokens\.weight" for this qwen3_5 config\. HINT: .*linear_attn\.\*.*strip that prefix to model\.\*/,
      );
      expect(reload.load([['model.embed_tokens.weight', emb]])).toBe(1);
    } finally {
      reload.abort();
      engine.release();
    }
  });
});
