/**
 * Rope tables (src/model/rope-scaling.ts): inv_freq and the attention scaling of every rope
 * type against an fp64 transcription of Transformers' rope initialisers written here
 * (modeling_rope_utils: default, linear, dynamic NTK, yarn, llama3), the cache, the refusals,
 * and the config round trip of the rope fields.
 */
import { describe, expect, it } from 'vitest';
import { ConfigError, InvalidArgumentError } from '../src/runtime/errors.js';
import { parseModelConfig, toHFConfig, type RopeConfig } from '../src/model/config.js';
import { computeRopeTable, ropeTable } from '../src/model/rope-scaling.js';

/** HF's rope_parameters keys as a plain dict (snake_case), for the transcription below. */
type HFRope = Record<string, number | boolean | string | undefined>;

/** Transformers' `ROPE_INIT_FUNCTIONS[rope_type](config, seq_len)`, transcribed in fp64. */
function hfRope(p: HFRope, dim: number, maxPositionEmbeddings: number, seqLen?: number): { invFreq: number[]; attentionFactor: number } {
  const base = p.rope_theta as number;
  const half = Array.from({ length: dim / 2 }, (_, i) => 2 * i); // torch.arange(0, dim, 2)
  const defaultInv = (b: number) => half.map((a) => 1 / b ** (a / dim));
  const factor = p.factor as number;
  const orig = (p.original_max_position_embeddings as number | undefined) ?? maxPositionEmbeddings;
  switch (p.rope_type) {
    case 'default':
      return { invFreq: defaultInv(base), attentionFactor: 1 };
    case 'linear':
      return { invFreq: defaultInv(base).map((f) => f / factor), attentionFactor: 1 };
    case 'dynamic': {
      const L = seqLen !== undefined && seqLen > orig ? seqLen : orig;
      const b = base * ((factor * L) / orig - (factor - 1)) ** (dim / (dim - 2));
      return { invFreq: defaultInv(b), attentionFactor: 1 };
    }
    case 'yarn': {
      const getMscale = (scale: number, mscale = 1) => (scale <= 1 ? 1 : 0.1 * mscale * Math.log(scale) + 1);
      const attentionFactor = (p.attention_factor as number | undefined) ?? getMscale(factor);
      const betaFast = (p.beta_fast as number | undefined) || 32;
      const betaSlow = (p.beta_slow as number | undefined) || 1;
      const findCorrectionDim = (numRotations: number) => (dim * Math.log(orig / (numRotations * 2 * Math.PI))) / (2 * Math.log(base));
      const truncate = p.truncate ?? true;
      let low = findCorrectionDim(betaFast),
        high = findCorrectionDim(betaSlow);
      if (truncate) {
        low = Math.floor(low);
        high = Math.ceil(high);
      }
      low = Math.max(low, 0);
      high = Math.min(high, dim - 1);
      const linearRamp = (min: number, max: number, n: number) => {
        if (min === max) max += 0.001;
        return Array.from({ length: n }, (_, j) => Math.min(1, Math.max(0, (j - min) / (max - min))));
      };
      const posFreqs = half.map((a) => base ** (a / dim));
      const extrapolation = posFreqs.map((f) => 1 / f);
      const interpolation = posFreqs.map((f) => 1 / (factor * f));
      const extrapolationFactor = linearRamp(low, high, dim / 2).map((r) => 1 - r);
      return {
        invFreq: half.map((_, i) => interpolation[i]! * (1 - extrapolationFactor[i]!) + extrapolation[i]! * extrapolationFactor[i]!),
        attentionFactor,
      };
    }
    case 'llama3': {
      const inv = defaultInv(base);
      const low = p.low_freq_factor as number,
        high = p.high_freq_factor as number;
      const oldContext = p.original_max_position_embeddings as number;
      const lowWavelen = oldContext / low,
        highWavelen = oldContext / high;
      const out = inv.map((f) => {
        const wavelen = (2 * Math.PI) / f;
        const llama = wavelen > lowWavelen ? f / factor : f;
        const smooth = (oldContext / wavelen - low) / (high - low);
        const smoothed = ((1 - smooth) * llama) / factor + smooth * llama;
        const medium = !(wavelen < highWavelen) && !(wavelen > lowWavelen);
        return medium ? smoothed : llama;
      });
      return { invFreq: out, attentionFactor: 1 };
    }
  }
  throw new Error(`no transcription for ${String(p.rope_type)}`);
}

/** A Qwen3 config.json with `rope` as its rope_parameters. */
function qwen3(rope: HFRope, maxPositionEmbeddings = 40960): Record<string, unknown> {
  return {
    model_type: 'qwen3',
    hidden_size: 64,
    intermediate_size: 96,
    num_hidden_layers: 1,
    num_attention_heads: 2,
    num_key_value_heads: 1,
    head_dim: 128,
    rms_norm_eps: 1e-6,
    vocab_size: 32,
    max_position_embeddings: maxPositionEmbeddings,
    rope_parameters: rope,
  };
}

function closeRel(got: ArrayLike<number>, want: readonly number[], label: string): void {
  expect(got.length, label).toBe(want.length);
  for (let i = 0; i < want.length; i++) expect(Math.abs(got[i]! - want[i]!), `${label} [${i}]`).toBeLessThanOrEqual(1e-13 * Math.abs(want[i]!));
}

const CASES: Array<{ name: string; rope: HFRope; dim?: number; max?: number; seqLen?: number }> = [
  { name: 'default', rope: { rope_type: 'default', rope_theta: 1e6 } },
  { name: 'linear', rope: { rope_type: 'linear', rope_theta: 1e6, factor: 4 } },
  { name: 'dynamic below the original max', rope: { rope_type: 'dynamic', rope_theta: 1e6, factor: 4, original_max_position_embeddings: 32768 }, seqLen: 100 },
  {
    name: 'dynamic above the original max',
    rope: { rope_type: 'dynamic', rope_theta: 1e6, factor: 4, original_max_position_embeddings: 32768 },
    seqLen: 65536,
  },
  { name: 'dynamic from max_position_embeddings', rope: { rope_type: 'dynamic', rope_theta: 1e4, factor: 2 }, max: 2048, seqLen: 5000 },
  { name: 'yarn (Qwen3 long context)', rope: { rope_type: 'yarn', rope_theta: 1e6, factor: 4, original_max_position_embeddings: 32768 } },
  {
    name: 'yarn, explicit attention_factor and betas',
    rope: { rope_type: 'yarn', rope_theta: 1e6, factor: 8, original_max_position_embeddings: 4096, attention_factor: 0.8, beta_fast: 16, beta_slow: 2 },
  },
  { name: 'yarn, truncate false', rope: { rope_type: 'yarn', rope_theta: 1e6, factor: 4, original_max_position_embeddings: 32768, truncate: false } },
  { name: 'yarn over a partial rotary dim', rope: { rope_type: 'yarn', rope_theta: 1e7, factor: 4, original_max_position_embeddings: 262144 }, dim: 64 },
  { name: 'yarn, orig from max_position_embeddings', rope: { rope_type: 'yarn', rope_theta: 1e4, factor: 2 }, max: 4096, dim: 32 },
  {
    name: 'llama3',
    rope: { rope_type: 'llama3', rope_theta: 5e5, factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 },
  },
];

describe('rope tables against the Transformers definitions', () => {
  it.each(CASES)('$name', ({ rope, dim = 128, max = 40960, seqLen }) => {
    const cfg = parseModelConfig(qwen3(rope, max));
    const want = hfRope(rope, dim, max, seqLen);
    const got = computeRopeTable(cfg, dim, seqLen);
    closeRel(got.invFreq, want.invFreq, 'inv_freq');
    expect(Math.abs(got.scale - want.attentionFactor)).toBeLessThanOrEqual(1e-15);
    expect(ropeTable(cfg, dim, seqLen)).toEqual(got);
    // Every scaled case differs from the unscaled rope (dynamic only beyond the original max).
    const unscaled = hfRope({ rope_type: 'default', rope_theta: rope.rope_theta }, dim, max);
    const differs = want.attentionFactor !== 1 || want.invFreq.some((f, i) => Math.abs(f - unscaled.invFreq[i]!) > 1e-12 * unscaled.invFreq[i]!);
    expect(differs).toBe(rope.rope_type !== 'default' && !(rope.rope_type === 'dynamic' && (seqLen ?? 0) <= (rope.original_max_position_embeddings ?? max)));
  });

  it('yarn without attention_factor scales by 0.1 ln(factor) + 1 (1.1386 for factor 4)', () => {
    const t = computeRopeTable(parseModelConfig(qwen3({ rope_type: 'yarn', rope_theta: 1e6, factor: 4, original_max_position_embeddings: 32768 })), 128);
    expect(t.scale).toBeCloseTo(1.1386294361, 9);
  });

  it('the default table is theta^(-2i/dim) bit for bit (what the kernel computed before tables)', () => {
    const t = ropeTable(parseModelConfig(qwen3({ rope_type: 'default', rope_theta: 1e6 })), 128);
    expect(Array.from(t.invFreq)).toEqual(Array.from({ length: 64 }, (_, i) => Math.pow(1e6, (-2 * i) / 128)));
    expect(t.scale).toBe(1);
  });
});

describe('ropeTable cache and refusals', () => {
  it('caches per (config, dim, length bucket): lengths up to the original max share one table; dynamic beyond it is per length', () => {
    const cfg = parseModelConfig(qwen3({ rope_type: 'dynamic', rope_theta: 1e6, factor: 4, original_max_position_embeddings: 1024 }));
    expect(ropeTable(cfg, 128, 10)).toBe(ropeTable(cfg, 128, 1024));
    expect(ropeTable(cfg, 128, 2000)).toBe(ropeTable(cfg, 128, 2000));
    expect(ropeTable(cfg, 128, 2000)).not.toBe(ropeTable(cfg, 128, 2001));
    expect(ropeTable(cfg, 128, 2000).invFreq[63]).toBeLessThan(ropeTable(cfg, 128, 10).invFreq[63]!);
    expect(ropeTable(cfg, 64, 10).invFreq.length).toBe(32);
    const yarn = parseModelConfig(qwen3({ rope_type: 'yarn', rope_theta: 1e6, factor: 4, original_max_position_embeddings: 1024 }));
    expect(ropeTable(yarn, 128, 5)).toBe(ropeTable(yarn, 128, 50000)); // only dynamic reads the length
  });

  it('refuses a bad rotary dim or length with a hint', () => {
    const cfg = parseModelConfig(qwen3({ rope_type: 'default', rope_theta: 1e6 }));
    expect(() => ropeTable(cfg, 7)).toThrow(InvalidArgumentError);
    expect(() => ropeTable(cfg, 7)).toThrow(/rotary dim must be an even integer >= 2 but is 7.*HINT/);
    expect(() => ropeTable(cfg, 8, -1)).toThrow(/seqLen must be a non-negative integer/);
    const noOrig = { rope: { type: 'yarn', theta: 1e6, factor: 4 } as RopeConfig };
    expect(() => ropeTable(noOrig, 8)).toThrow(/needs original_max_position_embeddings.*HINT/);
  });

  it('the config refuses dynamic / yarn with neither original_max_position_embeddings nor max_position_embeddings', () => {
    for (const rope_type of ['dynamic', 'yarn']) {
      const raw = qwen3({ rope_type, rope_theta: 1e6, factor: 4 });
      delete raw.max_position_embeddings;
      expect(() => parseModelConfig(raw)).toThrow(ConfigError);
      expect(() => parseModelConfig(raw)).toThrow(new RegExp(`rope type "${rope_type}" needs "original_max_position_embeddings".*HINT`));
    }
  });
});

describe('rope config round trip', () => {
  it.each([
    {
      rope_type: 'yarn',
      rope_theta: 1e6,
      factor: 4,
      original_max_position_embeddings: 32768,
      attention_factor: 1.2,
      beta_fast: 16,
      beta_slow: 2,
      truncate: false,
    },
    { rope_type: 'llama3', rope_theta: 5e5, factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 },
    { rope_type: 'dynamic', rope_theta: 1e4, factor: 2 },
    { rope_type: 'linear', rope_theta: 1e4, factor: 2 },
  ] as HFRope[])('toHFConfig / parse keeps every field of $rope_type', (rope) => {
    const cfg = parseModelConfig(qwen3(rope));
    const hf = toHFConfig(cfg);
    expect(hf.rope_parameters).toEqual(rope);
    const { rope_theta: _theta, ...legacy } = rope;
    expect(hf.rope_scaling).toEqual(legacy);
    expect(parseModelConfig(hf)).toEqual(cfg);
    expect(computeRopeTable(parseModelConfig(hf), 128, 100000)).toEqual(computeRopeTable(cfg, 128, 100000));
  });
});
