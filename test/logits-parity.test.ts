/**
 * Logits parity with an independent implementation: tiny Qwen3 dense and Qwen3-MoE checkpoints
 * in F32 and BF16 (Hugging Face folders, per-expert names) and the logits of a plain PyTorch
 * forward written from the HF architecture, made by scripts/make-parity-fixtures.py (committed
 * fixtures; torch is not needed here). Loaded through the trainer's checkpoint path, Ascent's
 * logits match within 1e-4 relative (BF16 weights are exact in fp32, so the same bound holds);
 * the rollout engine's log-probs of the next tokens match PyTorch's log-softmax too.
 * Qwen3.5 (qwen3_5-logits.json): a tiny Qwen3_5ForConditionalGeneration-style folder (nested
 * text_config, model.language_model.* names, a vision and an MTP tensor to skip) against a plain
 * PyTorch Qwen3.5 forward with the GDN recurrence (scripts/parity_qwen35.py); trainer logits only,
 * since the rollout engine refuses qwen3_5 in this build.
 * Qwen3.5-MoE (qwen3_5_moe-logits.json): the same kind of folder with the shared-expert sparse block
 * in every layer, once with fused experts as the hub writes them and once per-expert, both against
 * the one PyTorch forward (router top-k margin recorded, so fp32 and float64 pick the same experts).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createStrategy } from '../src/train/factory.js';
import { parseTrainerConfig } from '../src/train/config.js';
import { readF32Checkpoint } from '../src/train/checkpoint.js';
import { loadModelConfig } from '../src/model/config.js';
import { toFusedParams } from '../src/model/params.js';
import { RolloutEngine } from '../src/rollout/engine.js';
import { Device } from '../src/runtime/device/device.js';
import type { LossFn } from '../src/train/strategy.js';

const DIR = fileURLToPath(new URL('./fixtures/parity/', import.meta.url));
const fx = JSON.parse(readFileSync(join(DIR, 'logits.json'), 'utf8')) as {
  inputs: number[][];
  cases: Array<{ folder: string; logits: number[]; shape: number[] }>;
};

function logSoftmaxAt(logits: number[], V: number, row: number, token: number): number {
  const z = logits.slice(row * V, (row + 1) * V);
  const m = Math.max(...z);
  return z[token]! - m - Math.log(z.reduce((a, x) => a + Math.exp(x - m), 0));
}

async function trainerLogits(folder: string, inputs: number[][]): Promise<Float32Array> {
  const B = inputs.length,
    S = inputs[0]!.length;
  const s = await createStrategy(parseTrainerConfig({ strategy: 'single', model: folder, init: 'checkpoint' }), {
    comm: { size: 1, rank: 0 } as never,
    device: Device.get(0),
  });
  let got: Float32Array | null = null;
  try {
    // Every position's logits: the targets are all IGNORE, so the trimmed forward would keep one position.
    const capture: LossFn = async (tape, logits) => {
      got = (await logits.value.toArray({ stream: tape.stream })) as Float32Array;
      return { perToken: logits, weights: new Float32Array(logits.value.numel) };
    };
    await s.forward({ inputIds: Int32Array.from(inputs.flat()), targets: new Int32Array(B * S).fill(-100), batch: B, seqLen: S, trimPadding: false }, capture);
  } finally {
    s.release();
  }
  return got!;
}

describe.each([
  ['Qwen3.5 (GDN + gated attention)', 'qwen3_5-logits.json'],
  ['Qwen3.5-MoE (GDN + gated attention + shared-expert MoE)', 'qwen3_5_moe-logits.json'],
])('logits parity with a plain PyTorch %s', (_name, file) => {
  const q = JSON.parse(readFileSync(join(DIR, file), 'utf8')) as typeof fx;
  for (const c of q.cases) {
    it(`${c.folder}: trainer logits within 1e-4 relative`, async () => {
      const got = await trainerLogits(join(DIR, c.folder), q.inputs);
      expect(got.length).toBe(c.logits.length);
      const scale = Math.max(...c.logits.map(Math.abs));
      let worst = 0;
      for (let i = 0; i < c.logits.length; i++) worst = Math.max(worst, Math.abs(got[i]! - c.logits[i]!));
      expect(scale).toBeGreaterThan(0.1);
      expect(worst / scale).toBeLessThan(1e-4);
    });
  }
});

describe('logits parity with a plain PyTorch Qwen3 / Qwen3-MoE', () => {
  for (const c of fx.cases) {
    it(`${c.folder}: trainer logits within 1e-4 relative, engine log-probs within 1e-4`, async () => {
      const folder = join(DIR, c.folder);
      const B = fx.inputs.length,
        S = fx.inputs[0]!.length,
        V = c.shape[2]!;
      const s = await createStrategy(parseTrainerConfig({ strategy: 'single', model: folder, init: 'checkpoint' }), {
        comm: { size: 1, rank: 0 } as never,
        device: Device.get(0),
      });
      let got: Float32Array | null = null;
      try {
        const capture: LossFn = async (tape, logits) => {
          got = (await logits.value.toArray({ stream: tape.stream })) as Float32Array;
          return { perToken: logits, weights: new Float32Array(logits.value.numel) };
        };
        await s.forward(
          { inputIds: Int32Array.from(fx.inputs.flat()), targets: new Int32Array(B * S).fill(-100), batch: B, seqLen: S, trimPadding: false },
          capture,
        );
      } finally {
        s.release();
      }
      const scale = Math.max(...c.logits.map(Math.abs));
      let worst = 0;
      for (let i = 0; i < c.logits.length; i++) worst = Math.max(worst, Math.abs(got![i]! - c.logits[i]!));
      expect(worst / scale).toBeLessThan(1e-4);
      expect(worst).toBeGreaterThanOrEqual(0);

      const cfg = loadModelConfig(join(folder, 'config.json'));
      const e = RolloutEngine.create(cfg, { device: Device.get(0) });
      const reload = e.beginReload();
      reload.load(toFusedParams(await readF32Checkpoint(folder), cfg));
      reload.finish();
      const lps = await e.computeLogprobs(fx.inputs, { temperature: 1 });
      for (let b = 0; b < B; b++) {
        for (let t = 0; t < S - 1; t++) {
          const want = logSoftmaxAt(c.logits, V, b * S + t, fx.inputs[b]![t + 1]!);
          expect(Math.abs(lps[b]![t]! - want), `${c.folder} row ${b} pos ${t}`).toBeLessThan(1e-4 * Math.max(1, Math.abs(want)));
        }
      }
    });
  }
});
