/**
 * Training checkpoints: save → load into a strategy started from other weights
 * restores parameters and AdamW state exactly (the next step is bit-identical),
 * the trainer state's `extra` comes back, files are HF-format sharded safetensors, a
 * crash before any file operation of a save (a real SIGKILL of the saving process, before
 * every kind of operation in every phase, also when re-saving the step `latest` names) leaves `latest`
 * loading a complete checkpoint and the next save cleans up, and bad loads are clear errors.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { Checkpoint } from '../src/model/checkpoint.js';
import { loadModelConfig } from '../src/model/config.js';
import { initialParams } from '../src/model/params.js';
import { makeBatch } from '../src/data/synthetic-task.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import { latestCheckpoint, loadCheckpoint, saveCheckpoint } from '../src/train/checkpoint.js';
import { ensureParallelBuilt, ROOT } from './helpers/parallel-launch.js';

const cfgPath = (w: string) => join(ROOT, `examples/models/tiny-${w}/config.json`);
const hp = { lr: 1e-2, weightDecay: 0.01 };
const device = Device.get(0);
let dir: string;
/** The crash test runs many saves; on tmpfs their fsyncs are cheap. */
let fastDir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'ascent-ckpt-'));
  fastDir = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'ascent-ckpt-crash-'));
  ensureParallelBuilt();
}, 120_000);
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  rmSync(fastDir, { recursive: true, force: true });
});

async function train(s: SingleDeviceStrategy, steps: number, from: number): Promise<void> {
  for (let i = 0; i < steps; i++) {
    s.zeroGrad();
    await s.forwardBackward(makeBatch(100 + from + i, 4, 24));
    s.optimizerStep(hp);
  }
}

describe.each(['dense', 'moe'] as const)('checkpoint save / load / resume, tiny %s', (which) => {
  const cfg = loadModelConfig(cfgPath(which));

  it('a step folder is a Hugging Face model folder: the source config (unknown keys too), generation config and tokenizer files travel with it', async () => {
    const source = join(dir, `source-${which}`);
    cpSync(join(ROOT, `examples/models/tiny-${which}`), source, { recursive: true });
    const raw = JSON.parse(readFileSync(join(source, 'config.json'), 'utf8'));
    writeFileSync(join(source, 'config.json'), JSON.stringify({ ...raw, torch_dtype: 'bfloat16', my_custom_field: { keep: [1, 2] } }));
    writeFileSync(join(source, 'generation_config.json'), JSON.stringify({ eos_token_id: [2, 5], temperature: 0.7 }));
    writeFileSync(join(source, 'tokenizer_config.json'), JSON.stringify({ chat_template: '{{ messages }}' }));
    const root = join(dir, `hf-step-${which}`);
    const a = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 1));
    const b = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 2));
    try {
      const saved = await saveCheckpoint(a, { root, step: 1, source });
      const written = JSON.parse(readFileSync(join(saved, 'config.json'), 'utf8'));
      expect(written.my_custom_field).toEqual({ keep: [1, 2] });
      expect(written.torch_dtype).toBe('float32'); // the step folder's weights are fp32 master weights
      expect(written.hidden_size).toBe(raw.hidden_size);
      expect(JSON.parse(readFileSync(join(saved, 'generation_config.json'), 'utf8'))).toEqual({ eos_token_id: [2, 5], temperature: 0.7 });
      expect(readFileSync(join(saved, 'tokenizer_config.json'), 'utf8')).toContain('chat_template');
      // And it still resumes.
      await loadCheckpoint(b, { path: saved });
      const pa = await a.gatherState('params');
      const pb = await b.gatherState('params');
      for (const [n, p] of pa) expect(Buffer.from(pb.get(n)!.data.buffer).equals(Buffer.from(p.data.buffer)), n).toBe(true);
    } finally {
      a.release();
      b.release();
    }
  });

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

/** The operations a crash test kills before (see the comment in 'crash safety and errors'). */
function crashPoints(ops: ReadonlyArray<{ kind: string; path: string }>): number[] {
  const staging = (path: string) => path.startsWith('.tmp-');
  const lastStaging = ops.map((o) => staging(o.path)).lastIndexOf(true);
  const seen = new Set<string>();
  const points: number[] = [];
  ops.forEach((o, k) => {
    const first = !seen.has(o.kind);
    if (staging(o.path)) seen.add(o.kind);
    if (!staging(o.path) || first || k === lastStaging) points.push(k);
  });
  // Every kind of operation the save makes, in staging and on the root, is crashed at least once.
  expect(new Set(points.map((k) => `${ops[k]!.kind} ${staging(ops[k]!.path)}`))).toEqual(new Set(ops.map((o) => `${o.kind} ${staging(o.path)}`)));
  return points;
}

describe('crash safety and errors', () => {
  const cfg = loadModelConfig(cfgPath('dense'));

  // A real SIGKILL of the saving process just before its k-th file operation (model/file-ops.ts
  // is the seam every mutating operation of a save goes through), for these k (crashPoints):
  // every operation on the checkpoint root itself (moving `.old-` aside, the step folder's
  // rename, `latest`, the folder fsyncs, the cleanup), each one changes what a load finds; and in
  // the `.tmp-` staging folder, the first operation of each kind (mkdir, create, write, fsync,
  // rename, fsync-dir) and the last one. Staging is never loaded and the next save removes it
  // whole, so a crash there takes one path (the old `latest` loads, the folder is removed)
  // whichever of its files was being written: the second and third files' create / write / fsync
  // / rename repeat the first's and are not crashed again (a process start each, ~40% of the test).
  describe.each([
    ['re-saving the step `latest` names', 1],
    ['saving a new step', 2],
  ] as const)('a crash before any file operation while %s', (_what, newStep) => {
    it('leaves `latest` loading a complete checkpoint, and the next save cleans up', async () => {
      const base = join(fastDir, `crash-template-${newStep}`);
      const seed5 = initialParams(cfg, 5);
      const seed6 = initialParams(cfg, 6);
      const saver = SingleDeviceStrategy.create(cfg, device, seed5);
      const loader = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 7));
      try {
        await saveCheckpoint(saver, { root: base, step: 1 });
        const child = (root: string, killAt?: number) =>
          spawnSync(process.execPath, [join(ROOT, 'test/fixtures/train/ckpt-crash.mjs'), root, String(newStep), '6', cfgPath('dense')], {
            encoding: 'utf8',
            timeout: 60_000,
            env: { ...process.env, ...(killAt === undefined ? {} : { ASCENT_TEST_KILL_BEFORE_OP: String(killAt) }) },
          });
        // A full save first, to count its operations.
        const counted = join(fastDir, `crash-count-${newStep}`);
        cpSync(base, counted, { recursive: true });
        const full = child(counted);
        expect(full.status, full.stderr).toBe(0);
        const total = Number(/saved ops=(\d+)/.exec(full.stdout)?.[1]);
        expect(total).toBeGreaterThan(20);
        const ops = [...full.stdout.matchAll(/^op (\S+) (.*)$/gm)].map((m) => ({ kind: m[1]!, path: m[2]! }));
        expect(ops).toHaveLength(total);
        const points = crashPoints(ops);
        const leftovers = new Set<string>();
        const loadedSeeds = new Set<number>();
        for (const k of points) {
          const root = join(fastDir, `crash-${newStep}-${k}`);
          cpSync(base, root, { recursive: true });
          const r = child(root, k);
          expect(r.signal, `k=${k}: ${r.stderr}`).toBe('SIGKILL');
          expect(r.stdout).not.toContain('saved');
          for (const n of readdirSync(root)) if (n.startsWith('.')) leftovers.add(n.replace(/-.*/, ''));
          // `latest` always names a complete checkpoint: the old weights or the new ones, exactly.
          const loaded = await loadCheckpoint(loader, { path: root });
          const got = await loader.gatherState('params');
          const same = (want: Map<string, { data: Float32Array }>) =>
            [...want].every(([n, v]) => got.has(n) && Buffer.from(got.get(n)!.data.buffer).equals(Buffer.from(v.data.buffer))) && got.size === want.size;
          const seed = same(seed5) ? 5 : same(seed6) ? 6 : 0;
          expect(seed, `k=${k}: latest (${await latestCheckpoint(root)}) loads weights of neither save`).not.toBe(0);
          expect(loaded.state.step).toBe(seed === 6 ? newStep : 1);
          loadedSeeds.add(seed);
          // The next save repairs and cleans up: no temporary or moved-aside copies are left, and
          // every step folder it keeps is complete.
          await saveCheckpoint(loader, { root, step: 3 });
          expect(
            readdirSync(root).filter((n) => n.startsWith('.')),
            `k=${k}`,
          ).toEqual([]);
          expect(await latestCheckpoint(root)).toBe(join(root, 'step-000003'));
          for (const n of readdirSync(root).filter((d) => d.startsWith('step-'))) await loadCheckpoint(loader, { path: join(root, n) });
          expect(existsSync(join(root, 'step-000001', 'trainer_state.json')), `k=${k}`).toBe(true);
          rmSync(root, { recursive: true, force: true });
        }
        // Both outcomes happened, and the crashes left temporary files behind for the cleanup to face.
        expect([...loadedSeeds].sort()).toEqual([5, 6]);
        expect(leftovers.has('.tmp')).toBe(true);
        expect(leftovers.has('.latest.tmp')).toBe(true);
        if (newStep === 1) expect(leftovers.has('.old')).toBe(true);
      } finally {
        saver.release();
        loader.release();
      }
    }, 300_000);
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
