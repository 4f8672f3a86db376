/**
 * The trainer actor on worker ranks driven by this process (single controller): setup,
 * trainStep equals the single-device strategy run here, save / load through the actor,
 * and a bad config is a ConfigError naming the field that reaches the caller.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { World } from '../src/runtime/world.js';
import { Device } from '../src/runtime/device.js';
import { loadModelConfig } from '../src/model/config.js';
import { initialParams } from '../src/model/sft.js';
import { makeBatch } from '../src/model/synthetic-task.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
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
      const trainers = await world.spawn<TrainerActor>(trainerActorSpec({ strategy: 'single', model, init: { seed: 4 }, optimizer: { lr: 1e-2 }, clipGradNorm: 0.5 }));
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
