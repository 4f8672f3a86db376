import { describe, expect, it } from 'vitest';
import { CheckpointFormatError } from '../src/runtime/errors.js';
import { loadModelConfig, parseModelConfig, toHFConfig } from '../src/model/config.js';
import {
  checkParamsAgainstConfig,
  convertExpertLayout,
  detectExpertLayout,
  fusedExpertNames,
  initParams,
  paramSpecs,
  perExpertNames,
  toHostTensors,
  type HostTensor,
} from '../src/model/params.js';
import { Prng } from '../src/model/prng.js';

const dense = loadModelConfig('examples/models/tiny-dense/config.json');
const moe = loadModelConfig('examples/models/tiny-moe/config.json');
const [H, I, E, V, D] = [128, 128, 8, 64, 32];

function errorOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(CheckpointFormatError);
    return (err as Error).message;
  }
  throw new Error('expected a CheckpointFormatError');
}

describe('paramSpecs', () => {
  it('dense, tied: HF names and shapes, no lm_head', () => {
    const specs = paramSpecs(dense);
    const byName = new Map(specs.map((s) => [s.name, s.shape]));
    expect(specs[0]).toMatchObject({ name: 'model.embed_tokens.weight', shape: [V, H] });
    expect(byName.get('model.layers.1.self_attn.q_proj.weight')).toEqual([4 * D, H]);
    expect(byName.get('model.layers.1.self_attn.k_proj.weight')).toEqual([2 * D, H]);
    expect(byName.get('model.layers.1.self_attn.v_proj.weight')).toEqual([2 * D, H]);
    expect(byName.get('model.layers.1.self_attn.o_proj.weight')).toEqual([H, 4 * D]);
    expect(byName.get('model.layers.0.self_attn.q_norm.weight')).toEqual([D]);
    expect(byName.get('model.layers.0.mlp.gate_proj.weight')).toEqual([384, H]);
    expect(byName.get('model.layers.0.mlp.down_proj.weight')).toEqual([H, 384]);
    expect(specs[specs.length - 1].name).toBe('model.norm.weight');
    expect(byName.has('lm_head.weight')).toBe(false);
    expect(specs.length).toBe(1 + 2 * 11 + 1);
    const numel = specs.reduce((s, p) => s + p.shape.reduce((a, b) => a * b, 1), 0);
    const perLayer = 2 * H + 2 * D + H * 4 * D * 2 + 2 * (H * 2 * D) + 3 * H * 384;
    expect(numel).toBe(V * H + 2 * perLayer + H);
  });

  it('MoE, untied: router, fused or per-expert experts, lm_head', () => {
    const fused = new Map(paramSpecs(moe).map((s) => [s.name, s.shape]));
    expect(fused.get('model.layers.0.mlp.gate.weight')).toEqual([E, H]);
    expect(fused.get('model.layers.0.mlp.experts.gate_up_proj')).toEqual([E, 2 * I, H]);
    expect(fused.get('model.layers.1.mlp.experts.down_proj')).toEqual([E, H, I]);
    expect(fused.get('lm_head.weight')).toEqual([V, H]);
    expect(fused.has('model.layers.0.mlp.gate_proj.weight')).toBe(false);
    const per = new Map(paramSpecs(moe, { expertLayout: 'per-expert' }).map((s) => [s.name, s.shape]));
    expect(per.get('model.layers.1.mlp.experts.7.gate_proj.weight')).toEqual([I, H]);
    expect(per.get('model.layers.1.mlp.experts.7.up_proj.weight')).toEqual([I, H]);
    expect(per.get('model.layers.1.mlp.experts.7.down_proj.weight')).toEqual([H, I]);
    expect(per.size).toBe(fused.size - 2 * 2 + 2 * 3 * E);
  });

  it('dense layers of a MoE model (mlp_only_layers) get the dense MLP', () => {
    const cfg = parseModelConfig({ ...toHFConfig(moe), mlp_only_layers: [1] });
    const names = paramSpecs(cfg).map((s) => s.name);
    expect(names).toContain('model.layers.0.mlp.experts.gate_up_proj');
    expect(names).toContain('model.layers.1.mlp.gate_proj.weight');
    expect(names).not.toContain('model.layers.1.mlp.gate.weight');
  });
});

describe('detectExpertLayout', () => {
  const fusedNames = paramSpecs(moe).map((s) => s.name);
  const perNames = paramSpecs(moe, { expertLayout: 'per-expert' }).map((s) => s.name);

  it('detects each layout, and null for a dense model', () => {
    expect(detectExpertLayout(fusedNames, moe)).toBe('fused');
    expect(detectExpertLayout(perNames, moe)).toBe('per-expert');
    expect(
      detectExpertLayout(
        paramSpecs(dense).map((s) => s.name),
        dense,
      ),
    ).toBeNull();
  });

  it('a mixed set names both kinds', () => {
    expect(errorOf(() => detectExpertLayout([...fusedNames, 'model.layers.1.mlp.experts.3.up_proj.weight'], moe))).toMatch(
      /Mixed expert layouts: fused tensors \("model.layers.0.mlp.experts.gate_up_proj".*\) and per-expert tensors \("model.layers.1.mlp.experts.3.up_proj.weight"\)/,
    );
  });

  it('an incomplete set names the missing tensors', () => {
    const drop = new Set(['model.layers.1.mlp.experts.5.down_proj.weight', 'model.layers.0.mlp.experts.0.gate_proj.weight']);
    expect(
      errorOf(() =>
        detectExpertLayout(
          perNames.filter((n) => !drop.has(n)),
          moe,
        ),
      ),
    ).toBe(
      'Incomplete per-expert expert layout: 2 tensors missing: "model.layers.0.mlp.experts.0.gate_proj.weight", "model.layers.1.mlp.experts.5.down_proj.weight".',
    );
    expect(
      errorOf(() =>
        detectExpertLayout(
          fusedNames.filter((n) => n !== 'model.layers.1.mlp.experts.down_proj'),
          moe,
        ),
      ),
    ).toMatch(/Incomplete fused expert layout: 1 tensor missing: "model.layers.1.mlp.experts.down_proj"/);
    const many = perNames.filter((n) => !n.includes('.experts.'));
    expect(errorOf(() => detectExpertLayout([...many, 'model.layers.0.mlp.experts.0.up_proj.weight'], moe))).toMatch(/47 tensors missing: .* and 41 more/);
  });

  it('no experts at all, and experts the config does not have', () => {
    expect(
      errorOf(() =>
        detectExpertLayout(
          fusedNames.filter((n) => !n.includes('.experts.')),
          moe,
        ),
      ),
    ).toMatch(/No expert tensors for MoE layers \[0, 1\]/);
    expect(errorOf(() => detectExpertLayout([...perNames, 'model.layers.0.mlp.experts.8.up_proj.weight'], moe))).toMatch(
      /Unexpected expert tensors "model.layers.0.mlp.experts.8.up_proj.weight"; the config has MoE layers \[0, 1\] with experts 0..7/,
    );
    expect(errorOf(() => detectExpertLayout(['model.layers.0.mlp.experts.gate_up_proj'], dense))).toMatch(/config has no MoE layers/);
  });
});

describe('expert layout conversion', () => {
  it('per-expert → fused → per-expert is exact for EVERY parameter of the tiny MoE', () => {
    const per = toHostTensors(initParams(moe, 7, { expertLayout: 'per-expert' }));
    const fused = convertExpertLayout(per, moe, 'fused');
    expect([...fused.keys()]).toEqual(paramSpecs(moe).map((s) => s.name)); // HF order kept
    for (const s of paramSpecs(moe)) expect(fused.get(s.name)!.shape).toEqual(s.shape);
    const back = convertExpertLayout(fused, moe, 'per-expert');
    expect([...back.keys()]).toEqual([...per.keys()]);
    for (const [name, t] of per) {
      expect(back.get(name)!.shape, name).toEqual(t.shape);
      expect(Buffer.from(back.get(name)!.data).equals(Buffer.from(t.data)), name).toBe(true);
    }
  });

  it('fused rows: gate of expert e is rows [0, I) of slab e, up rows [I, 2I); down is slab e', () => {
    const per = initParams(moe, 3, { expertLayout: 'per-expert' });
    const fused = initParams(moe, 3); // fused by default
    for (const layer of [0, 1]) {
      const gu = fused.get(fusedExpertNames(layer).gateUp)!.data;
      const dn = fused.get(fusedExpertNames(layer).down)!.data;
      for (const e of [0, 5, 7]) {
        const n = perExpertNames(layer, e);
        const [r, c] = [17, 101];
        expect(gu[(e * 2 * I + r) * H + c]).toBe(per.get(n.gate)!.data[r * H + c]);
        expect(gu[(e * 2 * I + I + r) * H + c]).toBe(per.get(n.up)!.data[r * H + c]);
        expect(dn[(e * H + c) * I + r]).toBe(per.get(n.down)!.data[c * I + r]);
      }
    }
  });

  it('works on raw bytes of any dtype (BF16 and I8 round trips)', () => {
    for (const [dtype, size] of [
      ['BF16', 2],
      ['I8', 1],
    ] as const) {
      const rng = new Prng(11);
      const src = new Map<string, HostTensor>();
      for (const s of paramSpecs(moe)) {
        const data = new Uint8Array(s.shape.reduce((a, b) => a * b, 1) * size);
        for (let k = 0; k < data.length; k++) data[k] = rng.nextU32() & 0xff;
        src.set(s.name, { dtype, shape: s.shape, data });
      }
      const back = convertExpertLayout(convertExpertLayout(src, moe, 'per-expert'), moe, 'fused');
      expect(back.size).toBe(src.size);
      for (const [name, t] of src) {
        expect(back.get(name)!.dtype).toBe(dtype);
        expect(Buffer.from(back.get(name)!.data).equals(Buffer.from(t.data)), name).toBe(true);
      }
    }
  });

  it('same layout is a copy of the map; wrong shapes and mixed dtypes are errors naming the tensor', () => {
    const fused = toHostTensors(initParams(moe, 1));
    const same = convertExpertLayout(fused, moe, 'fused');
    expect(same).not.toBe(fused);
    expect([...same.keys()]).toEqual([...fused.keys()]);
    const bad = new Map(fused);
    const gu = fusedExpertNames(0).gateUp;
    bad.set(gu, { ...fused.get(gu)!, shape: [E, I, 2 * H] });
    expect(errorOf(() => convertExpertLayout(bad, moe, 'per-expert'))).toBe(
      'Tensor "model.layers.0.mlp.experts.gate_up_proj" has shape [8, 128, 256]; expected [8, 256, 128] for this config.',
    );
    const per = toHostTensors(initParams(moe, 1, { expertLayout: 'per-expert' }));
    const up = perExpertNames(1, 2).up;
    per.set(up, { ...per.get(up)!, dtype: 'BF16', data: per.get(up)!.data.subarray(0, I * H * 2) });
    expect(errorOf(() => convertExpertLayout(per, moe, 'fused'))).toMatch(/"model.layers.1.mlp.experts.2.up_proj.weight" is BF16; expected F32/);
  });
});

describe('initParams', () => {
  it('is deterministic per seed, and every spec is present with its shape', () => {
    const a = initParams(dense, 42);
    const b = initParams(dense, 42);
    const c = initParams(dense, 43);
    expect([...a.keys()]).toEqual(paramSpecs(dense).map((s) => s.name));
    for (const s of paramSpecs(dense)) {
      expect(a.get(s.name)!.shape).toEqual(s.shape);
      expect(a.get(s.name)!.data.length).toBe(s.shape.reduce((x, y) => x * y, 1));
      expect(Buffer.from(a.get(s.name)!.data.buffer).equals(Buffer.from(b.get(s.name)!.data.buffer))).toBe(true);
    }
    expect(a.get('model.embed_tokens.weight')!.data[0]).not.toBe(c.get('model.embed_tokens.weight')!.data[0]);
    // Different tensors get different streams.
    expect(a.get('model.layers.0.self_attn.k_proj.weight')!.data[0]).not.toBe(a.get('model.layers.0.self_attn.v_proj.weight')!.data[0]);
  });

  it('norms are ones; matrices are normal(0, 0.02)', () => {
    const p = initParams(moe, 5);
    for (const s of paramSpecs(moe)) {
      const d = p.get(s.name)!.data;
      if (s.kind === 'norm') {
        expect(
          d.every((x) => x === 1),
          s.name,
        ).toBe(true);
        continue;
      }
      const mean = d.reduce((x, y) => x + y, 0) / d.length;
      const std = Math.sqrt(d.reduce((x, y) => x + (y - mean) ** 2, 0) / d.length);
      expect(Math.abs(mean), s.name).toBeLessThan(0.003);
      expect(std, s.name).toBeGreaterThan(0.018);
      expect(std, s.name).toBeLessThan(0.022);
    }
  });
});

describe('checkParamsAgainstConfig', () => {
  it('accepts exactly the specs in either layout, and a stray lm_head for a tied model', () => {
    expect(checkParamsAgainstConfig(paramSpecs(moe), moe)).toBe('fused');
    expect(checkParamsAgainstConfig(paramSpecs(moe, { expertLayout: 'per-expert' }), moe)).toBe('per-expert');
    expect(checkParamsAgainstConfig([...paramSpecs(dense), { name: 'lm_head.weight', shape: [V, H] }], dense)).toBeNull();
  });

  it('lists missing, misshapen and unexpected tensors in one error', () => {
    const specs = paramSpecs(dense)
      .filter((s) => s.name !== 'model.norm.weight')
      .map((s) => (s.name === 'model.layers.0.self_attn.k_proj.weight' ? { ...s, shape: [H, H] } : s));
    specs.push({ name: 'model.layers.0.self_attn.q_proj.bias', shape: [H], kind: 'linear' });
    expect(errorOf(() => checkParamsAgainstConfig(specs, dense))).toBe(
      'Checkpoint does not match the qwen3 config: missing "model.norm.weight"; "model.layers.0.self_attn.k_proj.weight" has shape [128, 128], expected [64, 128]; unexpected "model.layers.0.self_attn.q_proj.bias".',
    );
  });
});
