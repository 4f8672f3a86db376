/**
 * LoRA adapter sync (colocated, single-device LoRA strategy → tp 1 engine, in process):
 * after a full sync of the base weights and a training step of the adapters, an
 * adapter-only sync rewrites exactly the runtime parameters holding adapted weights
 * (checksums of every other parameter unchanged), never runs post-load processing, and
 * gives the same log-probs as (a) the trainer's LoRA forward (verify) and (b) an engine
 * that got a merged full sync (adapters merged into the base on the trainer, then a full
 * sync), within 1e-4. Tiny-dense (q, v, down adapted) and tiny-moe (q + fused experts).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { initialParams } from '../src/model/params.js';
import { syntheticTask } from '../src/data/index.js';
import { RolloutEngine } from '../src/rollout/index.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import { ColocateSync } from '../src/sync/index.js';
import { cfgOf } from './helpers/rollout-reference.js';

const device = Device.get(0);
const hp = { lr: 5e-2, eps: 1e-8, weightDecay: 0 };
const probe = (V: number) => Array.from({ length: 3 }, (_, i) => [...syntheticTask.makeProblem(21, i).prompt, 3 + i, 5, 7].map((x) => x % V));
const released: Array<{ release(): void }> = [];
afterAll(() => released.forEach((x) => x.release()));

async function checksums(e: RolloutEngine): Promise<Map<string, string>> {
  return new Map([...(await e.checksums())].map(([n, c]) => [n, `${c.layout}:${c.checksum}`]));
}

describe.each([
  ['dense', { rank: 4, alpha: 8, targetModules: ['q', 'v', 'down'] }, ['self_attn.qkv_proj.weight', 'mlp.down_proj.weight']],
  ['moe', { rank: 4, alpha: 8, targetModules: ['q'], targetParameters: ['mlp.experts.gate_up_proj'] }, ['self_attn.qkv_proj.weight', 'mlp.experts.w13_weight']],
] as const)('adapter sync, tiny %s', (which, loraCfg, adaptedSuffixes) => {
  it('changes only adapted runtime params, no processing, log-probs equal the trainer and a merged full sync', async () => {
    const cfg = cfgOf(which);
    const s = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 7), {
      lora: { config: { ...loraCfg, targetModules: [...loraCfg.targetModules] } as never },
    });
    const engine = RolloutEngine.create(cfg, { device });
    released.push(s, engine);
    // Post-load processing runs only in a reload session's finish(): count the reloads opened.
    let processCalls = 0;
    const begin = engine.beginReload.bind(engine);
    engine.beginReload = () => {
      processCalls++;
      return begin();
    };
    const sync = new ColocateSync({ strategy: s, engine });
    const verify = { probe: { ids: probe(cfg.vocabSize), temperature: 0.9 }, tolerance: 1e-4 };
    const full = await sync.sync({ verify });
    expect(full.kind).toBe('full');
    // Train the adapters so B != 0.
    for (let i = 0; i < 2; i++) {
      s.zeroGrad();
      await s.forwardBackward(syntheticTask.makeBatch(3 + i, 4, 16));
      s.optimizerStep(hp);
    }
    const before = await checksums(engine);
    const rep = await sync.sync({ adapterOnly: true, verify });
    expect(rep.kind).toBe('adapter');
    expect(rep.tensors).toBe(s.lora!.adapters.names.length);
    expect(rep.verified!.maxLogprobDiff).toBeLessThan(1e-4);
    const after = await checksums(engine);
    const changed = [...after.keys()].filter((n) => after.get(n) !== before.get(n)).sort();
    const expected = [...after.keys()].filter((n) => adaptedSuffixes.some((x) => n.endsWith(x))).sort();
    expect(changed).toEqual(expected);
    expect(processCalls).toBe(0);

    // Reference: merge on the trainer, then a full sync into a fresh engine.
    const ref = RolloutEngine.create(cfg, { device });
    released.push(ref);
    s.lora!.adapters.merge((n) => s.store.get(n).value, device.defaultStream);
    await new ColocateSync({ strategy: s, engine: ref }).sync();
    s.lora!.adapters.unmerge((n) => s.store.get(n).value, device.defaultStream);
    const a = await engine.computeLogprobs(probe(cfg.vocabSize), { temperature: 0.9 });
    const b = await ref.computeLogprobs(probe(cfg.vocabSize), { temperature: 0.9 });
    let diff = 0;
    a.forEach((r, i) => r.forEach((v, t) => (diff = Math.max(diff, Math.abs(v - b[i]![t]!)))));
    expect(diff).toBeLessThan(1e-4);
  }, 30_000);
});
