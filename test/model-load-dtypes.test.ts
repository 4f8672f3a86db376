/**
 * Model weights load from F32, BF16 and F16 safetensors into fp32 master weights: the
 * widening is exact (F16 subnormals, limits, inf; BF16 as the top half of an fp32), a
 * BF16 checkpoint initialises the trainer with exactly its values, and a tensor of another
 * dtype is an error naming the tensor and the file.
 */
import { mkdtempSync, rmSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { halfToFloat, toFloat32 } from '../src/model/host-float.js';
import { writeSafetensors } from '../src/model/safetensors.js';
import { readF32Checkpoint } from '../src/train/checkpoint.js';
import { createStrategy } from '../src/train/factory.js';
import { parseTrainerConfig } from '../src/train/config.js';
import { loadModelConfig } from '../src/model/config.js';
import { initialParams } from '../src/model/params.js';
import { Device } from '../src/runtime/device/device.js';
import { CheckpointFormatError } from '../src/runtime/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'ascent-dtypes-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const f32bits = (x: number) => new Uint32Array(Float32Array.of(x).buffer)[0]!;
const bytesOf = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
/** fp32 → bf16 bits, round to nearest even. */
const toBf16 = (x: number) => {
  const u = f32bits(x);
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
};

describe('checkpoint dtypes', () => {
  it('widens F16 exactly (normals, subnormals, limits, infinities) and BF16 bit-exactly', () => {
    expect([0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x0400, 0x7c00, 0xfc00, 0x8000, 0x3555].map(halfToFloat)).toEqual([
      1,
      -2,
      65504,
      2 ** -24,
      1023 * 2 ** -24,
      2 ** -14,
      Infinity,
      -Infinity,
      -0,
      0.333251953125,
    ]);
    expect(Number.isNaN(halfToFloat(0x7e00))).toBe(true);
    const v = [1.5, -3.140625, 1e-20, 65504];
    const bf = Uint16Array.from(v.map(toBf16));
    const got = toFloat32(bytesOf(bf), 'BF16', { file: 'f', tensor: 't' });
    expect([...got].map(f32bits)).toEqual(v.map((x) => (toBf16(x) << 16) >>> 0));
    expect(() => toFloat32(new Uint8Array(8), 'I32', { file: 'model.safetensors', tensor: 'model.norm.weight' })).toThrow(
      /model\.safetensors: model\.norm\.weight is I32; model weights load from F32, BF16 or F16 tensors/,
    );
  });

  it('a BF16 checkpoint initialises the trainer with exactly its values; an I32 tensor is a CheckpointFormatError naming it', async () => {
    const cfgPath = new URL('../examples/models/tiny-dense/config.json', import.meta.url).pathname;
    const cfg = loadModelConfig(cfgPath);
    const model = join(dir, 'bf16-model');
    const { mkdirSync } = await import('node:fs');
    mkdirSync(model);
    copyFileSync(cfgPath, join(model, 'config.json'));
    const params = initialParams(cfg, 11);
    const tensors = [...params].map(([name, p]) => ({ name, dtype: 'BF16' as const, shape: p.shape, data: bytesOf(Uint16Array.from(p.data, toBf16)) }));
    await writeSafetensors(join(model, 'model.safetensors'), tensors);
    const read = await readF32Checkpoint(model);
    const name = 'model.layers.0.self_attn.q_proj.weight';
    expect([...read.get(name)!.data].map(f32bits)).toEqual([...params.get(name)!.data].map((x) => (toBf16(x) << 16) >>> 0));
    const s = await createStrategy(parseTrainerConfig({ strategy: 'single', model, init: 'checkpoint' }), {
      comm: { size: 1, rank: 0 } as never,
      device: Device.get(0),
    });
    try {
      const state = await s.gatherState('params');
      expect([...state.get(name)!.data].map(f32bits)).toEqual([...read.get(name)!.data].map(f32bits));
    } finally {
      s.release();
    }
    const bad = join(dir, 'i32-model');
    mkdirSync(bad);
    await writeSafetensors(join(bad, 'model.safetensors'), [{ name: 'model.norm.weight', dtype: 'I32', shape: [2], data: new Uint8Array(8) }]);
    const err = await readF32Checkpoint(bad).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(CheckpointFormatError);
    expect((err as Error).message).toMatch(/i32-model\/model\.safetensors: model\.norm\.weight is I32/);
  });
});
