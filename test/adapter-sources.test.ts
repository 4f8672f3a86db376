// Adapters as sources (src/parallel/adapter-sources.ts): a LoRA strategy publishes its
// adapters (targets, scaling, merged, a gather of the whole tensors) and the adapter-only
// sync reads only that; a strategy without LoRA publishes none, and the sync refuses it
// with a hint; a gather that misses an adapter names it.
import { afterAll, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { InvalidArgumentError } from '../src/runtime/errors.js';
import { initialParams } from '../src/model/params.js';
import { LoraAdapters } from '../src/model/lora.js';
import { adapterSourcesOf } from '../src/parallel/adapter-sources.js';
import { RolloutEngine } from '../src/rollout/index.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import { ColocateSync } from '../src/sync/index.js';
import { cfgOf } from './helpers/rollout-reference.js';

const device = Device.get(0);
const released: Array<{ release(): void }> = [];
afterAll(() => released.forEach((x) => x.release()));

describe('adapter sources', () => {
  it('a LoRA strategy publishes its targets, scaling and whole adapters; merging shows', async () => {
    const cfg = cfgOf('dense');
    const s = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 7), { lora: { config: { rank: 4, alpha: 8, targetModules: ['q', 'v'] } as never } });
    released.push(s);
    const a = s.adapterSources()!;
    expect(a.layout).toBe('single');
    expect(a.scaling).toBe(2);
    expect(a.targets.map((t) => t.base).sort()).toEqual(
      Array.from({ length: cfg.numLayers }, (_, i) => [`model.layers.${i}.self_attn.q_proj.weight`, `model.layers.${i}.self_attn.v_proj.weight`])
        .flat()
        .sort(),
    );
    const host = await a.gather();
    for (const t of a.targets) {
      expect(host.get(t.a)!.shape[0], t.a).toBe(4);
      expect(host.get(t.b)!.shape[1], t.b).toBe(4);
    }
    expect(a.merged).toBe(false);
    s.lora!.adapters.merge((n) => s.store.get(n).value, device.defaultStream);
    expect(a.merged).toBe(true);
  });

  it('a strategy without LoRA publishes none, and an adapter-only sync refuses it with a hint', async () => {
    const cfg = cfgOf('dense');
    const s = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 7));
    const engine = RolloutEngine.create(cfg, { device });
    released.push(s, engine);
    expect(s.adapterSources()).toBeNull();
    const err = await new ColocateSync({ strategy: s, engine }).sync({ adapterOnly: true }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toMatch(/the single strategy has no LoRA adapters\. HINT: create the strategy with \{ lora \}/);
  });

  it('a gather that misses an adapter names it', async () => {
    const cfg = cfgOf('dense');
    const adapters = new LoraAdapters(cfg, { rank: 2, alpha: 2, targetModules: ['q'] } as never);
    const err = await adapterSourcesOf('dp2', adapters, () => Promise.resolve(new Map()))
      .gather()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toContain(`Adapter sources (dp2): the gathered adapters have no ${adapters.targets[0]!.a}. HINT:`);
  });
});
