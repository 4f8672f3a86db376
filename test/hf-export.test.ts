/**
 * Models out: a trained model written as a Hugging Face folder — the input config.json with
 * every key kept (unknown ones too) and its dtype set, generation_config.json and the
 * tokenizer files copied, weights in the chosen dtype (rounded to nearest even), MoE experts
 * per expert by default or fused — loads back into a trainer with exactly the saved values.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { exportHfModel, halfBits } from '../src/train/hf-export.js';
import { halfToFloat } from '../src/model/host-float.js';
import { readF32Checkpoint } from '../src/train/checkpoint.js';
import { createStrategy } from '../src/train/factory.js';
import { parseTrainerConfig } from '../src/train/config.js';
import { Device } from '../src/runtime/device/device.js';
import { Checkpoint } from '../src/model/checkpoint.js';
import { RolloutEngine } from '../src/rollout/engine.js';
import { loadModelConfig } from '../src/model/config.js';
// @ts-expect-error plain JS fixture
import { makeCharModel } from './fixtures/grpo/char-model.mjs';

const dir = mkdtempSync(join(tmpdir(), 'ascent-export-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const one = { comm: { size: 1, rank: 0 } as never, device: Device.get(0) };
const f32bits = (x: number) => new Uint32Array(Float32Array.of(x).buffer)[0]!;
const bf16 = (x: number) => {
  const u = f32bits(x);
  return new Float32Array(Uint32Array.of(((((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff) << 16) >>> 0).buffer)[0]!;
};

describe('Hugging Face model folder export', () => {
  it('fp32 → half rounds to nearest even and saturates like IEEE', () => {
    for (const x of [0, 1, -2, 0.1, 65504, 65520, 1e-8, 6e-8, 2 ** -24, 3.140625, -0.333]) {
      const h = halfToFloat(halfBits(x));
      const err = Math.abs(h - x);
      // Within half a unit in the last place of the half grid (or inf past the largest half).
      if (Math.abs(x) >= 65520) expect(h).toBe(Math.sign(x) * Infinity);
      else expect(err).toBeLessThanOrEqual(Math.max(2 ** -25, Math.abs(x) * 2 ** -11));
    }
    expect(halfBits(1)).toBe(0x3c00);
    expect(halfBits(-2)).toBe(0xc000);
    expect(halfBits(65504)).toBe(0x7bff);
    expect(halfBits(2 ** -24)).toBe(1);
  });

  it('keeps every config key, copies generation config and tokenizer files, writes bf16, and loads back exactly', async () => {
    const src = makeCharModel(join(dir, 'src'));
    const s = await createStrategy(parseTrainerConfig({ strategy: 'single', model: src, init: { seed: 4 } }), one);
    const out = join(dir, 'out-bf16');
    try {
      await exportHfModel(s, { dir: out, source: src, dtype: 'bfloat16' });
      const cfg = JSON.parse(readFileSync(join(out, 'config.json'), 'utf8'));
      expect(cfg.custom_field).toEqual({ kept: true });
      expect(cfg.torch_dtype).toBe('bfloat16');
      for (const f of ['generation_config.json', 'tokenizer.json', 'tokenizer_config.json'])
        expect(readFileSync(join(out, f), 'utf8')).toBe(readFileSync(join(src, f), 'utf8'));
      const ck = await Checkpoint.open(out);
      const dtypes = new Set(ck.tensors.map((t) => t.dtype));
      await ck.close();
      expect([...dtypes]).toEqual(['BF16']);
      const want = await s.gatherState('params');
      const back = await createStrategy(parseTrainerConfig({ strategy: 'single', model: out, init: 'checkpoint' }), one);
      try {
        const got = await back.gatherState('params');
        for (const [n, p] of want) expect([...got.get(n)!.data], n).toEqual([...p.data].map(bf16));
      } finally {
        back.release();
      }
      await expect(exportHfModel(s, { dir: out, source: src })).rejects.toThrow(/exists and is not empty/);
      // The exported folder generates the same text as the weights it was written from (bf16-rounded), greedily.
      const exported = await readF32Checkpoint(out);
      const rounded = new Map([...want].map(([n, p]) => [n, { shape: p.shape, data: Float32Array.from(p.data, bf16) }]));
      const gen = async (w: Map<string, { shape: readonly number[]; data: Float32Array }>) => {
        const e = RolloutEngine.create(loadModelConfig(join(out, 'config.json')), { device: Device.get(0) });
        const reload = e.beginReload();
        reload.load(w);
        reload.finish();
        return (
          await e.generate(
            [
              [1, 5, 9, 14],
              [1, 20, 21],
            ],
            { maxTokens: 8, temperature: 0, eosTokenId: 2 },
          )
        ).tokens;
      };
      expect(await gen(exported)).toEqual(await gen(rounded));
    } finally {
      s.release();
    }
  });

  it('MoE experts per expert by default (transformers 4.x names), fused on request; both load back equal', async () => {
    const cfgPath = new URL('../examples/models/tiny-moe/config.json', import.meta.url).pathname;
    const src = join(dir, 'moe-src');
    mkdirSync(src);
    copyFileSync(cfgPath, join(src, 'config.json'));
    const s = await createStrategy(parseTrainerConfig({ strategy: 'single', model: src, init: { seed: 5 } }), one);
    try {
      const want = await s.gatherState('params');
      for (const [layout, name] of [
        ['per-expert', 'model.layers.0.mlp.experts.3.gate_proj.weight'],
        ['fused', 'model.layers.0.mlp.experts.gate_up_proj'],
      ] as const) {
        const out = join(dir, `moe-${layout}`);
        await exportHfModel(s, { dir: out, source: src, expertLayout: layout });
        const read = await readF32Checkpoint(out);
        expect(read.has(name), name).toBe(true);
        expect(JSON.parse(readFileSync(join(out, 'config.json'), 'utf8')).dtype).toBe('float32');
        const back = await createStrategy(parseTrainerConfig({ strategy: 'single', model: out, init: 'checkpoint' }), one);
        try {
          const got = await back.gatherState('params');
          for (const [n, p] of want) expect(Buffer.from(got.get(n)!.data.buffer).equals(Buffer.from(p.data.buffer)), `${layout} ${n}`).toBe(true);
        } finally {
          back.release();
        }
      }
      expect(existsSync(join(dir, 'moe-fused', 'generation_config.json'))).toBe(true);
      // No layout asked: the source checkpoint's layout is kept.
      for (const layout of ['per-expert', 'fused'] as const) {
        const out = join(dir, `moe-default-from-${layout}`);
        await exportHfModel(s, { dir: out, source: join(dir, `moe-${layout}`) });
        const names = [...(await readF32Checkpoint(out)).keys()];
        expect(names.includes('model.layers.0.mlp.experts.gate_up_proj'), out).toBe(layout === 'fused');
        expect(names.includes('model.layers.0.mlp.experts.3.gate_proj.weight'), out).toBe(layout === 'per-expert');
      }
    } finally {
      s.release();
    }
  });

  it("qwen3_5_moe: the source checkpoint's expert layout by default, fused (as the hub writes it) without one", async () => {
    const fixture = new URL('./fixtures/parity/qwen3_5_moe-per-expert-f32', import.meta.url).pathname;
    const bare = join(dir, 'q35moe-config-only');
    mkdirSync(bare);
    copyFileSync(join(fixture, 'config.json'), join(bare, 'config.json'));
    const s = await createStrategy(parseTrainerConfig({ strategy: 'single', model: fixture, init: 'checkpoint' }), one);
    try {
      for (const [source, fused] of [
        [fixture, false],
        [bare, true],
      ] as const) {
        const out = join(dir, `q35moe-${fused ? 'fused' : 'per-expert'}`);
        await exportHfModel(s, { dir: out, source });
        const names = [...(await readF32Checkpoint(out)).keys()];
        expect(
          names.some((n) => n.endsWith('mlp.experts.gate_up_proj')),
          out,
        ).toBe(fused);
        expect(
          names.some((n) => /mlp\.experts\.0\.gate_proj\.weight$/.test(n)),
          out,
        ).toBe(!fused);
      }
    } finally {
      s.release();
    }
  });
});

describe('LoRA exports', () => {
  it("PEFT's adapter folder (base_model.model. names, adapter_config.json) and the merged model W + (alpha/r)·B·A", async () => {
    const cfgPath = new URL('../examples/models/tiny-dense/config.json', import.meta.url).pathname;
    const src = join(dir, 'lora-src');
    mkdirSync(src);
    copyFileSync(cfgPath, join(src, 'config.json'));
    const lora = { rank: 4, alpha: 8, targetModules: ['q', 'down'] };
    const config = parseTrainerConfig({ strategy: 'single', model: src, init: { seed: 6 }, lora });
    const s = await createStrategy(config, one);
    try {
      // PEFT starts B at zero: give the adapters values so the merge is visible.
      const state = await s.gatherState('params');
      for (const [n, p] of state) if (/lora_[AB]/.test(n)) p.data.forEach((_, i) => (p.data[i] = Math.sin(i + n.length) * 0.1));
      await s.loadState({ params: state });
      await exportHfModel(s, { dir: join(dir, 'adapter'), source: src, lora: config.lora! });
      const ad = await readF32Checkpoint(join(dir, 'adapter', 'adapter_model.safetensors'));
      const qa = 'base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight';
      expect(ad.has(qa)).toBe(true);
      expect([...ad.keys()].every((k) => k.startsWith('base_model.model.') && /lora_[AB]/.test(k))).toBe(true);
      expect(ad.size).toBe(2 * 2 * 2); // 2 layers x (q, down) x (A, B)
      expect(JSON.parse(readFileSync(join(dir, 'adapter', 'adapter_config.json'), 'utf8'))).toMatchObject({
        peft_type: 'LORA',
        r: 4,
        lora_alpha: 8,
        target_modules: ['q_proj', 'down_proj'],
        task_type: 'CAUSAL_LM',
      });
      await exportHfModel(s, { dir: join(dir, 'merged'), source: src, lora: config.lora!, merged: true });
      const merged = await readF32Checkpoint(join(dir, 'merged'));
      expect([...merged.keys()].some((k) => k.includes('lora'))).toBe(false);
      const base = state.get('model.layers.0.mlp.down_proj.weight')!,
        A = state.get('model.layers.0.mlp.down_proj.lora_A.weight')!,
        B = state.get('model.layers.0.mlp.down_proj.lora_B.weight')!;
      const [O, I] = base.shape as [number, number];
      const got = merged.get('model.layers.0.mlp.down_proj.weight')!.data;
      let worst = 0;
      for (let i = 0; i < O; i++) {
        for (let j = 0; j < I; j++) {
          let d = 0;
          for (let k = 0; k < 4; k++) d += B.data[i * 4 + k]! * A.data[k * I + j]!;
          worst = Math.max(worst, Math.abs(got[i * I + j]! - (base.data[i * I + j]! + 2 * d)));
        }
      }
      expect(worst).toBeLessThan(1e-6);
      expect(worst).toBeGreaterThanOrEqual(0);
      expect(Math.abs(got[0]! - base.data[0]!)).toBeGreaterThan(0); // the merge changed the weight
    } finally {
      s.release();
    }
  });
});
