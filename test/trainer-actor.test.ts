/**
 * The trainer actor on worker ranks driven by this process (single controller): setup,
 * trainStep equals the single-device strategy run here, save / load through the actor,
 * and a bad config is a ConfigError naming the field that reaches the caller; on 2 ranks,
 * megatron tp2 with `lora` in the trainer config trains 2 steps like the single-device
 * LoRA strategy and changes only the adapters.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { World } from '../src/runtime/actor-system/world.js';
import { Device } from '../src/runtime/device/device.js';
import { loadModelConfig, toHFConfig } from '../src/model/config.js';
import { writeCheckpoint } from '../src/model/checkpoint.js';
import { detectExpertLayout, initParams, toHostTensors } from '../src/model/params.js';
import { initialParams } from '../src/model/params.js';
import { makeBatch } from '../src/data/synthetic-task.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import { LoraAdapters } from '../src/model/lora.js';
import { parseTrainerConfig } from '../src/train/config.js';
import { trainerActorSpec, type TrainerActor } from '../src/actors/index.js';
import { ensureParallelBuilt, ROOT } from './helpers/parallel-launch.js';

const model = join(ROOT, 'examples/models/tiny-moe');
let dir: string;
beforeAll(() => {
  ensureParallelBuilt();
  dir = mkdtempSync(join(tmpdir(), 'ascent-trainer-'));
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('trainer actor (one rank)', () => {
  it('trainStep matches the strategy run in this process; save and load round-trip', async () => {
    const world = await World.create({ size: 1, deviceMemory: '64MiB', taskPool: false });
    try {
      const trainers = await world.spawn<TrainerActor>(
        trainerActorSpec({ strategy: 'single', model, init: { seed: 4 }, optimizer: { lr: 1e-2 }, clipGradNorm: 0.5 }),
      );
      const [info] = await trainers.call('setup');
      expect(info).toEqual({ rank: 0, groupRank: 0, layout: 'single' });
      const cfg = loadModelConfig(join(model, 'config.json'));
      const ref = SingleDeviceStrategy.create(cfg, Device.get(0), initialParams(cfg, 4));
      try {
        for (let step = 0; step < 2; step++) {
          const batch = makeBatch(step, 4, 24);
          const [r] = await trainers.call('trainStep', { inputIds: batch.inputIds, targets: batch.targets, batch: 4, seqLen: 24 });
          ref.zeroGrad();
          const want = await ref.forwardBackward(batch);
          const norm = await ref.clipGradNorm(0.5);
          ref.optimizerStep({ lr: 1e-2 });
          expect(r!.loss).toBeCloseTo(want.loss, 6);
          expect(r!.gradNorm).toBeCloseTo(norm, 5);
          expect(r!.step).toBe(step + 1);
        }
        const [got] = await trainers.call('gatherState', 'params');
        const want = await ref.gatherState('params');
        for (const [n, p] of want) expect(Buffer.from(got!.get(n)!.data.buffer).equals(Buffer.from(p.data.buffer)), n).toBe(true);
        const [saved] = await trainers.call('save', dir, 2, { note: 'x' });
        const [loaded] = await trainers.call('load', dir);
        expect(loaded).toEqual({ dir: saved, step: 2, extra: { note: 'x' } });
      } finally {
        ref.release();
      }
    } finally {
      await world.shutdown();
    }
  });

  it("init: 'checkpoint' loads the HF weights beside config.json (per-expert layout converted to fused)", async () => {
    const cfg = loadModelConfig(join(model, 'config.json'));
    const folder = join(dir, 'hf-model');
    mkdirSync(folder, { recursive: true });
    writeFileSync(join(folder, 'config.json'), JSON.stringify(toHFConfig(cfg)));
    const perExpert = initParams(cfg, 9, { expertLayout: 'per-expert' });
    const sources = [...toHostTensors(perExpert)].map(([name, t]) => ({ name, ...t }));
    await writeCheckpoint(folder, sources, { maxShardBytes: 256 * 1024 });
    expect(detectExpertLayout(perExpert.keys(), cfg)).toBe('per-expert');
    const world = await World.create({ size: 1, deviceMemory: '64MiB', taskPool: false });
    try {
      const trainers = await world.spawn<TrainerActor>(trainerActorSpec({ strategy: 'single', model: folder, init: 'checkpoint' }));
      await trainers.call('setup');
      const [got] = await trainers.call('gatherState', 'params');
      const want = initialParams(cfg, 9);
      expect([...got!.keys()].sort()).toEqual([...want.keys()].sort());
      for (const [n, p] of want) expect(Buffer.from(got!.get(n)!.data.buffer).equals(Buffer.from(p.data.buffer)), n).toBe(true);
    } finally {
      await world.shutdown();
    }
  });

  it('a bad config is a ConfigError naming each bad field', async () => {
    const world = await World.create({ size: 1, deviceMemory: '64MiB', taskPool: false });
    try {
      const err = await world.spawn(trainerActorSpec({ strategy: 'zero3', model, tp: 0 } as never)).catch((e: Error) => e);
      expect(err).toBeInstanceOf(Error);
      expect((err as Error & { code?: string }).code).toBe('ASCENT_CONFIG');
      expect((err as Error).message).toMatch(/strategy: expected strategy to be one of single, fsdp2, megatron/);
      expect((err as Error).message).toMatch(/tp: expected a positive integer for tp/);
    } finally {
      await world.shutdown();
    }
  });
});

describe('trainer actor with LoRA (2 ranks, megatron tp2)', () => {
  it('the trainer config validates its lora field with the LoRA schema', () => {
    expect(parseTrainerConfig({ strategy: 'fsdp2', model, lora: { rank: 2, alpha: 4, targetModules: ['q'] } }).lora).toMatchObject({
      rank: 2,
      alpha: 4,
      dropout: 0,
      targetModules: ['q'],
    });
    const err = (() => {
      try {
        parseTrainerConfig({ strategy: 'megatron', model, lora: { rank: 0, alpha: 4, targetModules: ['qq'] } });
      } catch (e) {
        return e as Error & { code?: string };
      }
    })();
    expect(err?.code).toBe('ASCENT_CONFIG');
    expect(err?.message).toMatch(/lora\.rank: expected rank ≥ 1/);
    expect(err?.message).toMatch(/lora\.targetModules\.0: unknown module "qq"/);
  });

  it('trains 2 steps like the single-device LoRA strategy; only the adapters change', async () => {
    const dense = join(ROOT, 'examples/models/tiny-dense');
    const lora = { rank: 4, alpha: 8, targetModules: ['q', 'v', 'o', 'gate', 'down'], seed: 2 } as const;
    // eps 1e-3: AdamW's first steps are ~lr·sign(g); a small eps would amplify fp32 summation-order noise.
    const optimizer = { lr: 1e-2, eps: 1e-3 };
    const world = await World.create({ size: 2, deviceMemory: '64MiB', taskPool: false });
    try {
      const trainers = await world.spawn<TrainerActor>(
        trainerActorSpec({
          strategy: 'megatron',
          tp: 2,
          model: dense,
          init: { seed: 4 },
          optimizer,
          clipGradNorm: 1.0,
          lora: { ...lora, targetModules: [...lora.targetModules] },
        }),
      );
      const infos = await trainers.call('setup');
      expect(infos.map((i) => i!.layout)).toEqual(['tp2', 'tp2']);
      const cfg = loadModelConfig(join(dense, 'config.json'));
      const base = initialParams(cfg, 4);
      const init = new LoraAdapters(cfg, lora).initHost();
      const ref = SingleDeviceStrategy.create(cfg, Device.get(0), base, { lora: { config: lora } });
      try {
        for (let step = 0; step < 2; step++) {
          const batch = makeBatch(step, 4, 16);
          const rs = await trainers.call('trainStep', { inputIds: batch.inputIds, targets: batch.targets, batch: 4, seqLen: 16 });
          ref.zeroGrad();
          const want = await ref.forwardBackward(batch);
          const norm = await ref.clipGradNorm(1.0);
          ref.optimizerStep(optimizer);
          for (const r of rs) {
            expect(Math.abs(r!.loss - want.loss) / want.loss).toBeLessThan(1e-5);
            expect(Math.abs(r!.gradNorm - norm) / norm).toBeLessThan(1e-5);
          }
        }
        const want = await ref.gatherState('params');
        for (const got of await trainers.call('gatherState', 'params')) {
          expect([...got!.keys()].sort()).toEqual([...want.keys()].sort());
          for (const [n, p] of base) expect(Buffer.from(got!.get(n)!.data.buffer).equals(Buffer.from(p.data.buffer)), `base ${n} unchanged`).toBe(true);
          for (const [n, p] of init) {
            const g = got!.get(n)!.data;
            expect(Buffer.from(g.buffer).equals(Buffer.from(p.data.buffer)), `adapter ${n} trained`).toBe(false);
            const w = want.get(n)!.data;
            let diff = 0,
              scale = 0;
            for (let i = 0; i < w.length; i++) {
              diff = Math.max(diff, Math.abs(g[i]! - w[i]!));
              scale = Math.max(scale, Math.abs(w[i]!));
            }
            expect(diff / scale, `adapter ${n} vs single device`).toBeLessThan(1e-5);
          }
        }
      } finally {
        ref.release();
      }
    } finally {
      await world.shutdown();
    }
  });
});
