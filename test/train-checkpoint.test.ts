/**
 * Training checkpoints: save → load into a strategy started from other weights
 * restores parameters and AdamW state exactly (the next step is bit-identical),
 * the trainer state's `extra` comes back, files are HF-format sharded safetensors, a
 * crash at any stage of a save (a real SIGKILL of the saving process) leaves the
 * previous checkpoint and `latest` intact, and bad loads are clear errors.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device.js';
import { Checkpoint } from '../src/model/checkpoint.js';
import { loadModelConfig } from '../src/model/config.js';
import { initialParams } from '../src/model/sft.js';
import { makeBatch } from '../src/model/synthetic-task.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import { latestCheckpoint, loadCheckpoint, saveCheckpoint } from '../src/train/checkpoint.js';
import { ensureParallelBuilt, ROOT } from './helpers/parallel-launch.js';

const cfgPath = (w: string) => join(ROOT, `examples/models/tiny-${w}/config.json`);
const hp = { lr: 1e-2, weightDecay: 0.01 };
const device = Device.get(0);
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'ascent-ckpt-'));
  ensureParallelBuilt();
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function train(s: SingleDeviceStrategy, steps: number, from: number): Promise<void> {
  for (let i = 0; i < steps; i++) {
    s.zeroGrad();
    await s.forwardBackward(makeBatch(100 + from + i, 4, 24));
    s.optimizerStep(hp);
  }
}

describe.each(['dense', 'moe'] as const)('checkpoint save / load / resume, tiny %s', (which) => {
  const cfg = loadModelConfig(cfgPath(which));

  it('resume restores parameters and optimizer state exactly', async () => {
    const root = join(dir, `resume-${which}`);
    const a = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 1));
    const b = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 2));
    try {
      await train(a, 2, 0);
      const saved = await saveCheckpoint(a, { root, step: 2, maxShardBytes: 128 * 1024, extra: { cursor: 17 } });
      expect(await latestCheckpoint(root)).toBe(saved);
      // HF-format shards a plain reader opens, with an index.
      const ck = await Checkpoint.open(saved);
      expect(ck.shards.length).toBeGreaterThan(1);
      expect(ck.has('model.embed_tokens.weight')).toBe(true);
      await ck.close();
      const loaded = await loadCheckpoint(b, { path: root });
      expect(loaded.state.extra).toEqual({ cursor: 17 });
      expect(loaded.state.step).toBe(2);
      expect(b.optimizerSteps).toBe(2);
      await train(a, 1, 2);
      await train(b, 1, 2);
      const pa = await a.gatherState('params');
      const pb = await b.gatherState('params');
      for (const [n, p] of pa) expect(Buffer.from(pb.get(n)!.data.buffer).equals(Buffer.from(p.data.buffer)), n).toBe(true);
      const ma = await a.gatherState('exp_avg_sq');
      const mb = await b.gatherState('exp_avg_sq');
      for (const [n, p] of ma) expect(Buffer.from(mb.get(n)!.data.buffer).equals(Buffer.from(p.data.buffer)), n).toBe(true);
    } finally {
      a.release();
      b.release();
    }
  });
});

describe('crash safety and errors', () => {
  const cfg = loadModelConfig(cfgPath('dense'));

  it.each(['model', 'optimizer', 'trainer_state.json', 'rename'])('a SIGKILL after %s leaves the previous checkpoint intact', async (stage) => {
    const root = join(dir, `crash-${stage.replace(/\W/g, '')}`);
    const s = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 5));
    try {
      const first = await saveCheckpoint(s, { root, step: 1, maxShardBytes: 64 * 1024 });
      const before = readFileSync(join(first, 'model.safetensors.index.json'), 'utf8');
      const r = spawnSync(process.execPath, [join(ROOT, 'test/fixtures/train/ckpt-crash.mjs'), root, '2', stage, cfgPath('dense')], { encoding: 'utf8', timeout: 60_000 });
      expect(r.signal).toBe('SIGKILL');
      expect(r.stdout).not.toContain('saved');
      expect(await latestCheckpoint(root)).toBe(first);
      expect(readFileSync(join(first, 'model.safetensors.index.json'), 'utf8')).toBe(before);
      const other = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 6));
      try {
        await loadCheckpoint(other, { path: root });
        const p = await other.gatherState('params');
        const want = initialParams(cfg, 5);
        for (const [n, v] of want) expect(Buffer.from(p.get(n)!.data.buffer).equals(Buffer.from(v.data.buffer)), n).toBe(true);
      } finally {
        other.release();
      }
      // The next save clears the crashed save's temporary folder.
      await saveCheckpoint(s, { root, step: 3, maxShardBytes: 64 * 1024 });
      expect(readdirSync(root).filter((n) => n.startsWith('.tmp-'))).toEqual([]);
      expect(await latestCheckpoint(root)).toBe(join(root, 'step-000003'));
    } finally {
      s.release();
    }
  });

  it('loading another model, a missing folder or a non-checkpoint is a clear error', async () => {
    const root = join(dir, 'errors');
    const dense = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 5));
    const moeCfg = loadModelConfig(cfgPath('moe'));
    const moe = SingleDeviceStrategy.create(moeCfg, device, initialParams(moeCfg, 5));
    try {
      await saveCheckpoint(dense, { root, step: 4 });
      await expect(loadCheckpoint(moe, { path: root })).rejects.toThrow(/holds another model: modelType is "qwen3" in the checkpoint but "qwen3_moe"/);
      await expect(loadCheckpoint(dense, { path: join(dir, 'nope') })).rejects.toThrow(/neither a step folder .* nor a checkpoint root/);
      writeFileSync(join(root, 'latest'), '../../etc\n');
      await expect(loadCheckpoint(dense, { path: root })).rejects.toThrow(/expected a step folder like step-000010/);
      expect(existsSync(join(root, 'step-000004', 'optimizer'))).toBe(true);
      await expect(saveCheckpoint(dense, { root, step: -1 })).rejects.toThrow(/non-negative integer step/);
    } finally {
      dense.release();
      moe.release();
    }
  });
});
