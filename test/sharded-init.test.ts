/**
 * The trainer's initial weights from a Hugging Face checkpoint under fsdp2 and megatron go through the
 * sharded loader (test/fixtures/train/sharded-init.mjs on 4 real ranks under launch, through
 * createStrategy as TrainerActor and `ascent grpo` call it): every parameter equals the
 * checkpoint's value widened to fp32, for a sharded F32 dense model, a per-expert BF16 MoE
 * and a fused F32 MoE, in both load modes; the device peak during the load stays within what
 * the rank keeps (its shard, gradients and AdamW moments) plus one broadcast bucket, a bound
 * one full parameter on the device would break; a checkpoint missing a tensor stops every
 * rank with one error naming the tensor and the folder.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, ROOT, type LaunchRun } from './helpers/parallel-launch.js';
import { writeCheckpoint } from '../src/model/checkpoint.js';
import { convertExpertLayout, initParams, toHostTensors } from '../src/model/params.js';
import { parseModelConfig } from '../src/model/config.js';
import type { TensorSource } from '../src/model/safetensors.js';

const FIXTURE = 'test/fixtures/train/sharded-init.mjs';
const BUCKET = 1024 * 1024;
const SLACK = 64 * 1024; // 64-byte alignment of every allocation, the few-byte control tensors
const ENV = { HCCL_EXEC_TIMEOUT: '20', ASCENT_DEVICE_MEMORY: '256MiB' };
const dir = mkdtempSync(join(tmpdir(), 'ascent-sharded-init-'));

function toBf16(data: Float32Array): Uint8Array {
  const bits = new Uint32Array(data.buffer, data.byteOffset, data.length);
  const out = new Uint16Array(data.length);
  for (let i = 0; i < data.length; i++) out[i] = bits[i]! >>> 16;
  return new Uint8Array(out.buffer);
}

async function writeModel(
  name: string,
  base: 'tiny-dense' | 'tiny-moe',
  edit: Record<string, unknown>,
  opts: { dtype: 'F32' | 'BF16'; layout: 'per-expert' | 'fused'; drop?: string; misshape?: string; maxShardBytes?: number },
): Promise<string> {
  const out = join(dir, name);
  mkdirSync(out);
  const raw = { ...JSON.parse(readFileSync(join(ROOT, 'examples', 'models', base, 'config.json'), 'utf8')), ...edit };
  writeFileSync(join(out, 'config.json'), JSON.stringify(raw, null, 2));
  const cfg = parseModelConfig(raw, join(out, 'config.json'));
  const host = convertExpertLayout(toHostTensors(initParams(cfg, 7)), cfg, opts.layout);
  const tensors: TensorSource[] = [];
  for (const [n, t] of host) {
    if (n === opts.drop) continue;
    if (n === opts.misshape) {
      const shape = [t.shape[0]! + 1, ...t.shape.slice(1)];
      tensors.push({ name: n, dtype: 'F32', shape, data: new Uint8Array(shape.reduce((a, b) => a * b, 1) * 4) });
      continue;
    }
    const f32 = new Float32Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.byteLength));
    tensors.push({ name: n, dtype: opts.dtype, shape: t.shape, data: opts.dtype === 'F32' ? t.data : toBf16(f32) });
  }
  await writeCheckpoint(out, tensors, { maxShardBytes: opts.maxShardBytes ?? 1 << 30 });
  return out;
}

let denseBig: string;
let moePerExpert: string;
let moeFused: string;
let missing: string;
let misshapen: string;
beforeAll(async () => {
  ensureParallelBuilt();
  // vocab 8192: embed and lm_head are 4 MiB each in fp32, four buckets each; in three files.
  denseBig = await writeModel(
    'dense-big',
    'tiny-dense',
    { vocab_size: 8192, tie_word_embeddings: false },
    { dtype: 'F32', layout: 'fused', maxShardBytes: 3 << 20 },
  );
  moePerExpert = await writeModel('moe-per-expert', 'tiny-moe', {}, { dtype: 'BF16', layout: 'per-expert' });
  moeFused = await writeModel('moe-fused', 'tiny-moe', {}, { dtype: 'F32', layout: 'fused' });
  misshapen = await writeModel(
    'misshapen',
    'tiny-dense',
    { vocab_size: 8192, tie_word_embeddings: false },
    { dtype: 'F32', layout: 'fused', misshape: 'lm_head.weight', maxShardBytes: 3 << 20 },
  );
  missing = await writeModel('missing', 'tiny-dense', {}, { dtype: 'F32', layout: 'fused', drop: 'model.layers.1.self_attn.k_proj.weight' });
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Result {
  case: number;
  rank: number;
  peak: number;
  local: number;
  fullBytes: number;
  mismatch: string[];
  error?: { name: string; message: string };
}

type Case = readonly [model: string, mode: 'rank0-broadcast' | 'every-rank-reads', strategy: string];

/**
 * The cases run in as few launches as possible: a launch of 4 ranks costs more than a case, and a
 * case creates and releases its own strategy and measures from what was allocated before it
 * (the fixture's RESULT carries the case's index). The loads that succeed share one launch,
 * the loads that fail (an error every rank agrees on, then released) another, so a failure
 * cannot hide in the successes' world.
 */
function runner(cases: () => Case[]): (c: Case) => Promise<{ r: LaunchRun; results: Result[] }> {
  let run: Promise<LaunchRun> | undefined;
  return async (c) => {
    const list = cases();
    run ??= launchFixture(4, FIXTURE, [String(BUCKET), JSON.stringify(list)], ENV, 280_000);
    const r = await run;
    const index = list.findIndex((x) => x.join('\0') === c.join('\0'));
    expect(index, `case ${c.join(' ')}`).toBeGreaterThanOrEqual(0);
    return { r, results: (r.results as unknown as Result[]).filter((x) => x.case === index) };
  };
}

const loads = (): Case[] => [
  [denseBig, 'rank0-broadcast', 'fsdp2'],
  [denseBig, 'every-rank-reads', 'fsdp2'],
  [moePerExpert, 'rank0-broadcast', 'fsdp2'],
  [moeFused, 'rank0-broadcast', 'fsdp2'],
  [denseBig, 'rank0-broadcast', 'megatron:2:1'],
  [moePerExpert, 'rank0-broadcast', 'megatron:2:2'],
  [moeFused, 'rank0-broadcast', 'megatron:2:2'],
  [moeFused, 'rank0-broadcast', 'megatron:1:4'],
  // LoRA over a checkpoint base: the base loads the same way (adapters start from their PEFT init).
  [denseBig, 'rank0-broadcast', 'megatron:2:1:lora'],
  [denseBig, 'rank0-broadcast', 'fsdp2:1:1:lora'],
];
const failures = (): Case[] => [
  [missing, 'rank0-broadcast', 'fsdp2'],
  [missing, 'rank0-broadcast', 'megatron:2:1'],
  [misshapen, 'rank0-broadcast', 'fsdp2'],
];
const load = runner(loads);
const fail = runner(failures);

describe('fsdp2 initial weights through the sharded loader', () => {
  for (const mode of ['rank0-broadcast', 'every-rank-reads'] as const) {
    it(`${mode}: exact values; device peak within the kept shard plus one bucket`, async () => {
      const { r, results } = await load([denseBig, mode, 'fsdp2']);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      expect(results.map((x) => x.rank)).toEqual([0, 1, 2, 3]);
      expect(results[0]!.mismatch).toEqual([]);
      const largest = 8192 * 128 * 4;
      expect(results[0]!.fullBytes).toBeGreaterThan(2 * largest);
      for (const x of results) {
        expect(x.error, `rank ${x.rank}`).toBeUndefined();
        // It keeps a quarter of the model four times over (parameters, gradients, m, v).
        expect(x.local).toBeGreaterThan(results[0]!.fullBytes * 0.9);
        expect(x.local).toBeLessThan(results[0]!.fullBytes * 1.1);
        const bound = x.local + (mode === 'rank0-broadcast' ? BUCKET : 0) + SLACK;
        expect(x.peak, `rank ${x.rank}`).toBeLessThanOrEqual(bound);
        // The bound means something: one full embedding on the device would break it.
        expect(bound).toBeLessThan(x.local + largest);
      }
    }, 300_000);
  }

  it('MoE checkpoints, per-expert BF16 and fused F32, load exactly (each rank keeps its experts)', async () => {
    for (const model of [moePerExpert, moeFused]) {
      const { r, results } = await load([model, 'rank0-broadcast', 'fsdp2']);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      expect(results.length).toBe(4);
      for (const x of results) expect(x.error, `${model} rank ${x.rank}`).toBeUndefined();
      expect(results[0]!.mismatch, model).toEqual([]);
    }
  }, 300_000);

  it('megatron (TP 2 and TP 2 × EP 2) starts from dense and MoE checkpoints exactly through the same loader; LoRA runs load their base the same way', async () => {
    for (const [model, strategy] of [
      [denseBig, 'megatron:2:1'],
      [moePerExpert, 'megatron:2:2'],
      [moeFused, 'megatron:2:2'],
      [moeFused, 'megatron:1:4'],
      [denseBig, 'megatron:2:1:lora'],
      [denseBig, 'fsdp2:1:1:lora'],
    ] as const) {
      const { r, results } = await load([model, 'rank0-broadcast', strategy]);
      expect(r.stderr, `${model} ${strategy}`).toBe('');
      expect(r.code).toBe(0);
      expect(results.length).toBe(4);
      for (const x of results) expect(x.error, `${model} ${strategy} rank ${x.rank}`).toBeUndefined();
      expect(results[0]!.mismatch, `${model} ${strategy}`).toEqual([]);
    }
  }, 300_000);

  it('a missing tensor stops every rank with one error naming it and the folder (fsdp2 and megatron); a misshapen one names its shard file', async () => {
    for (const strategy of ['fsdp2', 'megatron:2:1']) {
      const { results } = await fail([missing, 'rank0-broadcast', strategy]);
      expect(results.map((x) => x.rank)).toEqual([0, 1, 2, 3]);
      for (const x of results) {
        expect(x.error?.name, `rank ${x.rank}`).toBe('CheckpointFormatError');
        expect(x.error!.message).toContain('model.layers.1.self_attn.k_proj.weight');
      }
      // Rank 0 read the files; the others got its error through the agreement.
      expect(results[0]!.error!.message).toContain(missing);
    }
    // A misshapen tensor of a sharded checkpoint: named with its shard file.
    const { results } = await fail([misshapen, 'rank0-broadcast', 'fsdp2']);
    expect(results.map((x) => x.rank)).toEqual([0, 1, 2, 3]);
    for (const x of results) {
      expect(x.error?.name, `rank ${x.rank}`).toBe('CheckpointFormatError');
      expect(x.error!.message).toMatch(/"lm_head\.weight" \(in model-0000\d-of-0000\d\.safetensors\) has shape \[8193, 128\], expected \[8192, 128\]/);
    }
  }, 300_000);
});
