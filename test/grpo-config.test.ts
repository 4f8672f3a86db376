/**
 * GRPO run config and flags: defaults, flags over a JSON file, and every bad value a
 * ConfigError naming the field; placement checks against the world size. Plus the
 * rollout → training-batch construction (targets over completions only, engine
 * values aligned to their target positions, rank pieces assembled).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseGrpoConfig } from '../src/grpo/config.js';
import { grpoConfigFromArgs } from '../src/grpo/cli.js';
import { resumeCheckpoint } from '../src/grpo/driver.js';
import { resolveMode } from '../src/grpo/placement.js';
import { alignToTargets, assembleRows, buildTrainBatch } from '../src/grpo/rollout-batch.js';

/** A host with fewer cores than ranks: `mode: 'auto'` resolves to server there, whatever machine runs the test. */
const busyHost = (ranks: number) => ({ ranksInProcess: ranks, cores: 1 });

describe('GRPO config', () => {
  it('defaults, and flags override the JSON file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'grpo-cfg-'));
    const file = join(dir, 'c.json');
    writeFileSync(file, JSON.stringify({ model: 'm', steps: 7, numGenerations: 4, sync: { verify: true } }));
    const c = parseGrpoConfig(grpoConfigFromArgs(['--config', file, '--steps', '9', '--mode', 'colocate', '--engine-tp', '2', '--bucket', '1MiB'], {}), 4);
    expect(c).toMatchObject({ model: 'm', steps: 9, numGenerations: 4, mode: 'colocate', engine: { tp: 2 }, sync: { verify: true, bucketBytes: 2 ** 20 } });
    expect(parseGrpoConfig({ model: 'x' }, 16, busyHost(16))).toMatchObject({
      mode: 'server',
      trainer: { strategy: 'fsdp2', tp: 1 },
      promptsPerStep: 16,
      numGenerations: 8,
      beta: 0,
    });
  });

  it("mode 'auto' (the default) colocates when one process runs every rank on a core of its own, else places server", () => {
    // One process, a core per rank: colocate (every rank busy in both phases).
    expect(parseGrpoConfig({ model: 'x' }, 2, { ranksInProcess: 2, cores: 2 }).mode).toBe('colocate');
    expect(parseGrpoConfig({ model: 'x' }, 1, { ranksInProcess: 1, cores: 2 }).mode).toBe('colocate');
    // More ranks than cores: server.
    expect(parseGrpoConfig({ model: 'x' }, 16, { ranksInProcess: 16, cores: 2 }).mode).toBe('server');
    expect(parseGrpoConfig({ model: 'x' }, 3, { ranksInProcess: 3, cores: 2 }).mode).toBe('server');
    // A world spread over processes (mpirun): server, whatever each host's cores.
    expect(parseGrpoConfig({ model: 'x' }, 4, { ranksInProcess: 2, cores: 64 }).mode).toBe('server');
    // A server-mode split in the config (trainer.ranks) means server.
    expect(parseGrpoConfig({ model: 'x', ...grpoConfigFromArgs(['--trainer-ranks', '1']) }, 2, { ranksInProcess: 2, cores: 2 }).mode).toBe('server');
    // An explicit mode is kept, on any host.
    expect(parseGrpoConfig({ model: 'x', mode: 'server' }, 2, { ranksInProcess: 2, cores: 2 }).mode).toBe('server');
    expect(parseGrpoConfig({ model: 'x', mode: 'colocate' }, 16, { ranksInProcess: 16, cores: 2 }).mode).toBe('colocate');
    expect(parseGrpoConfig({ model: 'x', ...grpoConfigFromArgs(['--mode', 'auto']) }, 16, { ranksInProcess: 16, cores: 32 }).mode).toBe('colocate');
    expect(resolveMode('auto', 8, { ranksInProcess: 8, cores: 8 })).toBe('colocate');
    expect(resolveMode('auto', 8, { ranksInProcess: 8, cores: 7 })).toBe('server');
  });

  it('bad values name the field and what is expected', () => {
    expect(() => parseGrpoConfig({ model: 'x', mode: 'both', temperature: -1, engine: { tp: 3 } }, 4)).toThrow(
      /mode: expected mode to be auto, server or colocate[\s\S]*engine\.tp: expected engine\.tp to be 1, 2 or 4[\s\S]*temperature: expected a positive temperature/,
    );
    expect(() => grpoConfigFromArgs(['--steps', 'many'])).toThrow(/--steps expects a number but received "many"/);
    expect(() => grpoConfigFromArgs(['--frobnicate'])).toThrow(/^GRPO flags: unknown option '--frobnicate'\. HINT: run with --help to list the flags\.$/);
    expect(() => parseGrpoConfig({ model: 'x', promptsPerStep: 3 }, 4, busyHost(4))).toThrow(/does not split over 2 engine replicas/);
    // trainer.dtype: the flag reaches the config; a bad value and megatron + bfloat16 are refused with what to do.
    expect(parseGrpoConfig({ model: 'x', ...grpoConfigFromArgs(['--trainer-dtype', 'bfloat16']) }, 4).trainer.dtype).toBe('bfloat16');
    expect(parseGrpoConfig({ model: 'x' }, 4).trainer.dtype).toBe('float32');
    expect(() => parseGrpoConfig({ model: 'x', trainer: { dtype: 'fp8' } }, 4)).toThrow(/expected trainer\.dtype to be 'float32' or 'bfloat16'/);
    expect(() => parseGrpoConfig({ model: 'x', trainer: { strategy: 'megatron', dtype: 'bfloat16' } }, 4)).toThrow(
      /trainer\.dtype 'bfloat16' is not supported by the megatron strategy[\s\S]*HINT: use strategy fsdp2/,
    );
    expect(() => parseGrpoConfig({ model: 'x', numGenerations: 3, promptsPerStep: 2 }, 8, busyHost(8))).toThrow(
      /6 samples do not split over 4 data-parallel trainer ranks/,
    );
    expect(() => parseGrpoConfig({ model: 'x', mode: 'server' }, 1)).toThrow(/leaves 0 trainer and 1 engine ranks/);
    expect(() => parseGrpoConfig({ model: 'x', resume: true }, 4)).toThrow(/--resume needs --checkpoint-dir/);
  });

  it('--rollout-dtype sets engine.dtype (default float32); another value names the field and the two accepted', () => {
    expect(parseGrpoConfig({ model: 'x' }, 4).engine).toEqual({ tp: 1, dtype: 'float32' });
    expect(parseGrpoConfig(grpoConfigFromArgs(['--model', 'x', '--rollout-dtype', 'bfloat16', '--engine-tp', '2']), 4).engine).toEqual({
      tp: 2,
      dtype: 'bfloat16',
    });
    expect(parseGrpoConfig({ model: 'x', engine: { dtype: 'bfloat16' } }, 4).engine.dtype).toBe('bfloat16');
    // A bf16 engine's probe tolerance defaults to bf16 rounding's size; a given one is kept.
    expect(parseGrpoConfig({ model: 'x' }, 4).sync.tolerance).toBe(1e-3);
    expect(parseGrpoConfig({ model: 'x', engine: { dtype: 'bfloat16' } }, 4).sync.tolerance).toBe(0.1);
    expect(parseGrpoConfig({ model: 'x', engine: { dtype: 'bfloat16' }, sync: { tolerance: 1e-2 } }, 4).sync.tolerance).toBe(1e-2);
    for (const bad of ['bf16', 'float16']) {
      expect(() => parseGrpoConfig(grpoConfigFromArgs(['--model', 'x', '--rollout-dtype', bad]), 4)).toThrow(
        /engine\.dtype: expected engine\.dtype to be 'float32' or 'bfloat16'/,
      );
    }
  });

  it('--resume needs a checkpoint to resume from, but not --checkpoint-every', async () => {
    const c = parseGrpoConfig(grpoConfigFromArgs(['--model', 'x', '--resume', '--checkpoint-dir', '/nowhere/at/all']), 4);
    expect(c.checkpoint).toEqual({ dir: '/nowhere/at/all' });
    await expect(resumeCheckpoint('/nowhere/at/all')).rejects.toThrow(/--resume: the checkpoint folder "\/nowhere\/at\/all" does not exist/);
    const empty = mkdtempSync(join(tmpdir(), 'grpo-empty-'));
    await expect(resumeCheckpoint(empty)).rejects.toThrow(/holds no checkpoint \(no `latest` file\)/);
    await expect(resumeCheckpoint(empty)).rejects.toMatchObject({ code: 'ASCENT_CONFIG' });
  });
});

describe('rollout batch', () => {
  it('targets cover exactly the completions; engine values land on their targets', () => {
    const prompts = [
      [1, 5, 6, 3],
      [1, 7, 3],
    ];
    const completions = [
      [6, 5, 2],
      [7, 2, 9, 9],
    ];
    const b = buildTrainBatch({ prompts, completions });
    expect(b.seqLen).toBe(7);
    expect([...b.inputIds]).toEqual([1, 5, 6, 3, 6, 5, 2, 1, 7, 3, 7, 2, 9, 9]);
    expect([...b.targets]).toEqual([-100, -100, -100, 6, 5, 2, -100, -100, -100, 7, 2, 9, 9, -100]);
    const lp = alignToTargets(b, prompts, [
      [-1, -2, -3],
      [-4, -5, -6, -7],
    ]);
    expect([...lp]).toEqual([0, 0, 0, -1, -2, -3, 0, 0, 0, -4, -5, -6, -7, 0]);
    const assembled = assembleRows(b, [
      { row0: 1, rows: 1, logprobs: new Float32Array(7).fill(2) },
      { row0: 0, rows: 1, logprobs: new Float32Array(7).fill(1) },
    ]);
    expect([...assembled]).toEqual([1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2]);
    expect(() => assembleRows(b, [{ row0: 0, rows: 1, logprobs: new Float32Array(7) }])).toThrow(/no rank returned row 1/);
  });
});
