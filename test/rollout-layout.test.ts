/**
 * Layout states of the rollout engine's runtime parameters (tp = 1, in process, tiny
 * dense and MoE): the preprocessed → processed transition (a reload session's finish())
 * runs exactly once; a wrong-layout write, a second processing, a partial reload or
 * generating from unprocessed / dropped weights is a WeightLayoutError naming the
 * parameter and both layouts; checksums equal an independent host packing; a direct
 * session's processed writes (colocated sync) give the trainer's logits; sleep levels 1 and 2 really free device memory and wake restores (or refuses
 * until a sync). Multi-rank slicing is checked in rollout-engine.test.ts.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { Tensor } from '../src/runtime/device/tensor.js';
import { InvalidArgumentError, WeightLayoutError } from '../src/runtime/errors.js';
import { initialParams } from '../src/model/params.js';
import { convertExpertLayout, toHostTensors } from '../src/model/params.js';
import { RolloutEngine, runtimeChecksum, tpShard } from '../src/rollout/index.js';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';
import { cfgOf, expectedChecksums, expectedRuntime, maxRelErr, prompts, Reference } from './helpers/rollout-reference.js';

const device = Device.get(0);

function caught(fn: () => unknown): any {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new Error('expected a throw');
}

describe.each(['dense', 'moe'] as const)('rollout layout states, tiny %s', (which) => {
  const cfg = cfgOf(which);
  const host = initialParams(cfg, 7);
  const engines: RolloutEngine[] = [];
  const make = () => {
    const e = RolloutEngine.create(cfg, { device });
    engines.push(e);
    return e;
  };
  afterEach(() => {
    for (const e of engines.splice(0)) e.release();
  });
  const firstLayer = cfg.moe ? 'model.layers.0.mlp.experts.w13_weight' : 'model.layers.0.mlp.gate_up_proj.weight';

  it('reloaded weights are preprocessed (checksums = host packing) until finish(); generating from an unfinished reload, or processing twice, is a WeightLayoutError', async () => {
    const e = make();
    const reload = e.beginReload();
    reload.load(host);
    expect(new Set(e.layoutStates().values())).toEqual(new Set(['preprocessed']));
    const sums = await e.checksums(); // reads are allowed while the session is open
    if (cfg.moe) {
      // At tp = 1 the preprocessed w13 / w2 are byte-for-byte the fused gate_up_proj / down_proj.
      const gu = host.get('model.layers.0.mlp.experts.gate_up_proj')!.data;
      expect(sums.get(firstLayer)).toEqual({
        layout: 'preprocessed',
        shape: [8, 256, 128],
        checksum: runtimeChecksum(new Uint8Array(gu.buffer, gu.byteOffset, gu.byteLength)),
      });
    }
    reload.abort(); // never finished: the weights stay preprocessed
    const err = caught(() => e.generate(prompts(2), { maxTokens: 2 }));
    expect(err).toBeInstanceOf(WeightLayoutError);
    expect(err.code).toBe('ASCENT_WEIGHT_LAYOUT');
    expect(err.details).toEqual({ parameter: 'model.embed_tokens.weight', expected: 'processed', actual: 'preprocessed' });
    expect(err.message).toContain('finish()');

    const full = e.beginReload();
    full.load(host);
    full.finish();
    const want = expectedChecksums(cfg, host, 1, 0);
    for (const [n, c] of await e.checksums()) expect([n, c.layout, c.checksum]).toEqual([n, 'processed', want[n]]);
    if (cfg.moe) expect((await e.checksums()).get(firstLayer)!.shape).toEqual([8, 128, 256]);
    // A second processing of the same weights: a reload that wrote nothing finds them processed.
    const empty = e.beginReload();
    const twice = caught(() => empty.finish());
    expect(twice).toBeInstanceOf(WeightLayoutError);
    expect(twice.details).toMatchObject({ parameter: 'model.embed_tokens.weight', expected: 'preprocessed', actual: 'processed' });
    expect(twice.message).toContain('exactly once');
    empty.abort();
    for (const [n, c] of await e.checksums()) expect([n, c.layout, c.checksum]).toEqual([n, 'processed', want[n]]); // nothing changed
  });

  it('a partial reload is refused by finish(), naming the missing checkpoint tensor; the session stays open to complete it', async () => {
    const e = make();
    const perExpert = cfg.moe ? convertExpertLayout(toHostTensors(host), cfg, 'per-expert') : toHostTensors(host);
    const missing = cfg.moe ? 'model.layers.1.mlp.experts.5.up_proj.weight' : 'model.layers.1.self_attn.k_proj.weight';
    const reload = e.beginReload();
    reload.load([...perExpert].filter(([n]) => n !== missing));
    const err = caught(() => reload.finish());
    expect(err).toBeInstanceOf(WeightLayoutError);
    expect(err.message).toContain(missing);
    expect(new Set(e.layoutStates().values())).toEqual(new Set(['preprocessed'])); // nothing processed
    expect(reload.open).toBe(true);
    reload.load([[missing, perExpert.get(missing)!]]);
    reload.finish();
    const ref = Reference.create(cfg, 7);
    try {
      const p = prompts(1)[0]!;
      expect(maxRelErr((await e.prefillLogits([p]))[0]!, await ref.logits(p))).toBeLessThan(1e-4);
    } finally {
      ref.release();
    }
  });

  it('a direct session writes the processed layout (checked against state and shape) and gives the trainer logits with no post-load', async () => {
    const e = make();
    const reload = e.beginReload();
    reload.load(host);
    reload.finish();
    const other = initialParams(cfg, 8);
    const packed = expectedRuntime(cfg, other, 1, 0);
    const procShape = (n: string) => e.params.get(n).spec.procShape;
    const direct = e.beginDirect();
    // A preprocessed-shape tensor where the processed layout is written (the experts' dims differ).
    if (cfg.moe) {
      const bad = caught(() => direct.write(firstLayer, { shape: e.params.get(firstLayer).spec.preShape, data: packed.get(firstLayer)! }));
      expect(bad).toBeInstanceOf(InvalidArgumentError);
      expect(bad.message).toContain('[8, 128, 256]');
    }
    // Unknown name, a source without a shape.
    expect(caught(() => direct.write('model.layers.0.self_attn.q_proj.weight', { shape: [1], data: new Float32Array(1) })).message).toContain('qkv_proj');
    expect(caught(() => direct.write(firstLayer, packed.get(firstLayer) as any))).toBeInstanceOf(InvalidArgumentError);
    const before = await e.checksums();
    expect(before.get(firstLayer)!.checksum).toBe(expectedChecksums(cfg, host, 1, 0)[firstLayer]); // failed writes changed nothing

    // Direct processed writes of every runtime parameter (device tensors for half of them).
    const tmp: Tensor[] = [];
    let i = 0;
    for (const [n, data] of packed) {
      const shape = procShape(n);
      if (i++ % 2) direct.write(n, { shape, data });
      else {
        const t = Tensor.fromArray(device, data, shape);
        tmp.push(t);
        direct.write(n, t);
      }
    }
    direct.finish();
    for (const t of tmp) t.release();
    const ref = Reference.create(cfg, 8);
    try {
      for (const p of prompts(3, 21)) expect(maxRelErr((await e.prefillLogits([p]))[0]!, await ref.logits(p))).toBeLessThan(1e-4);
    } finally {
      ref.release();
    }
    // Directly written weights need no processing: a reload that wrote nothing finds them processed.
    const empty = e.beginReload();
    const post = caught(() => empty.finish());
    expect(post).toBeInstanceOf(WeightLayoutError);
    expect(post.details.actual).toBe('processed');
    // A processed tensor into a parameter an aborted reload left preprocessed is refused too.
    empty.load([['model.embed_tokens.weight', host.get('model.embed_tokens.weight')!]]);
    empty.abort();
    const late = e.beginDirect();
    const mid = caught(() => late.write('model.embed_tokens.weight', host.get('model.embed_tokens.weight')!));
    expect(mid).toBeInstanceOf(WeightLayoutError);
    expect(mid.details).toEqual({ parameter: 'model.embed_tokens.weight', expected: 'preprocessed', actual: 'processed' });
    expect(mid.message).toContain('beginReload()');
    late.abort();
  });

  it('sleep(1) offloads weights and KV cache (device memory freed); wake restores identical weights and outputs', async () => {
    const e = make();
    const reload = e.beginReload();
    reload.load(host);
    reload.finish();
    const ps = prompts(3, 31);
    const before = await e.generate(ps, { maxTokens: 5, temperature: 0.9, seed: 5 });
    const sums = await e.checksums();
    const held = e.deviceBytes();
    const alloc = device.stats().allocated;
    await e.sleep(1);
    expect(e.deviceBytes()).toBe(0);
    expect(alloc - device.stats().allocated).toBeGreaterThanOrEqual(held);
    // Freed, and kept resident for the device's next allocations (a colocated trainer's step), not
    // given to the OS: emptying the cache here made every colocated GRPO step fault its pages again.
    expect(device.stats().cached).toBeGreaterThan(0);
    expect(() => e.generate(ps, { maxTokens: 2 })).toThrow(/asleep/);
    await expect(e.sleep(1)).rejects.toThrow(/asleep/);
    expect(await e.checksums()).toEqual(sums); // offloaded bytes are still verifiable
    e.wake();
    expect(e.deviceBytes()).toBe(held);
    expect(await e.checksums()).toEqual(sums);
    expect(await e.generate(ps, { maxTokens: 5, temperature: 0.9, seed: 5 })).toEqual(before);
  });

  it('sleep(2) drops weights; after wake generation refuses until weights are written again', async () => {
    const e = make();
    const reload = e.beginReload();
    reload.load(host);
    reload.finish();
    const ps = prompts(3, 41);
    const before = await e.generate(ps, { maxTokens: 5, temperature: 0 });
    const held = e.deviceBytes();
    const alloc = device.stats().allocated;
    await e.sleep(2);
    expect(alloc - device.stats().allocated).toBeGreaterThanOrEqual(held);
    e.wake();
    expect(new Set(e.layoutStates().values())).toEqual(new Set(['dropped']));
    const err = caught(() => e.generate(ps, { maxTokens: 2 }));
    expect(err).toBeInstanceOf(WeightLayoutError);
    expect(err.details).toMatchObject({ expected: 'processed', actual: 'dropped' });
    expect(err.message).toContain('sleep level 2');
    expect((await e.checksums()).get(firstLayer)!.checksum).toBeNull();
    const again = e.beginReload();
    again.load(host);
    again.finish();
    expect(await e.generate(ps, { maxTokens: 5, temperature: 0 })).toEqual(before);
  });

  it('bad inputs are InvalidArgumentErrors that say what was wrong', () => {
    const e = make();
    const reload = e.beginReload();
    expect(caught(() => reload.load([['model.layers.9.mlp.up_proj.weight', host.get('model.norm.weight')!]])).message).toContain('unknown checkpoint tensor');
    expect(caught(() => reload.load([['model.norm.weight', host.get('model.embed_tokens.weight')!]])).message).toContain('needs [128]');
    // BF16 / F16 checkpoints load (widened or kept per parameter, rollout-bf16.test.ts); integer tensors are refused.
    expect(caught(() => reload.load([['model.norm.weight', { dtype: 'I32', shape: [128], data: new Uint8Array(512) }]])).message).toMatch(
      /model\.norm\.weight is I32; the rollout engine loads F32, BF16 or F16 weights\. HINT: /,
    );
    reload.load(host); // refused loads leave the session usable
    reload.finish();
    const p = prompts(2);
    for (const [params, msg] of [
      [{ maxTokens: 0 }, 'maxTokens'],
      [{ maxTokens: 2, topP: 0 }, 'topP'],
      [{ maxTokens: 2, temperature: -1 }, 'temperature'],
      [{ maxTokens: 2, seed: 1.5 }, 'seed'],
      [{ maxTokens: 2, temprature: 1 }, "Unknown option 'temprature'"],
      [{ maxTokens: 500 }, 'KV cache holds 128'],
    ] as const) {
      const err = caught(() => e.generate(p, params as any));
      expect(err, msg).toBeInstanceOf(InvalidArgumentError);
      expect(err.message).toContain(msg);
    }
    expect(caught(() => e.generate([[1, 64]], { maxTokens: 1 })).message).toContain('prompts[0][1] is 64');
    expect(
      caught(() =>
        e.generate(
          Array.from({ length: 9 }, () => [1]),
          { maxTokens: 1 },
        ),
      ).message,
    ).toContain('maxBatch 8');
    expect(caught(() => e.computeLogprobs(p, {} as any)).message).toContain('temperature');
    expect(caught(() => e.wake()).message).toContain('not asleep');
    expect(caught(() => RolloutEngine.create(cfg, { device, waitTimeoutMs: -1 })).message).toContain('waitTimeoutMs');
    expect(caught(() => RolloutEngine.create(cfg, { device, maxBatch: 0 })).message).toContain('maxBatch');
    expect(caught(() => tpShard(cfg, 3, 0)).message).toContain('Tensor parallel size 3 does not divide num_attention_heads (4)');
    expect(caught(() => tpShard(cfg, 2, 2)).message).toContain('tpRank in [0, 2)');
    return expect(e.sleep(3 as any)).rejects.toThrow(/level 1 or 2/);
  });
});

describe('sleep and wake on real tensor-parallel ranks (launch)', () => {
  beforeAll(() => ensureParallelBuilt(), 120_000);

  it('tiny moe, tp = 2: every rank frees its weights and KV cache, restores (level 1) or refuses until a reload (level 2)', async () => {
    const run = await launchFixture(2, 'test/fixtures/rollout/sleep-tp.mjs', ['moe']);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.results.map((r) => r.rank)).toEqual([0, 1]);
    for (const r of run.results as any[]) {
      const [freed1, sameAfterWake1, freed2] = r.freed;
      expect(r.held).toBeGreaterThan(0);
      expect(freed1).toBeGreaterThanOrEqual(r.held);
      expect(sameAfterWake1).toBe(true);
      expect(freed2).toBeGreaterThanOrEqual(r.held);
      expect(r.refused).toMatchObject({ name: 'WeightLayoutError', code: 'ASCENT_WEIGHT_LAYOUT', details: { expected: 'processed', actual: 'dropped' } });
      expect(r.same).toBe(true);
    }
  });
});
