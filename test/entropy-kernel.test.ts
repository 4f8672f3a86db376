/**
 * The fused token-log-prob + exact-entropy kernel (native/kernels/model/softmax_entropy.cc)
 * against a brute-force fp64 JS definition on hand-made logits (with a temperature, an
 * ignored row, a peaked and a flat row), its backward against fp64 central differences of
 * that definition, fast = reference on both vector paths (AVX2 and portable), the log-prob
 * half bit-equal to tokenLogprobs(), and a bad target failing the stream.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Device, Tensor, loadNative, type KernelImpl } from '../src/runtime/device/device-index.js';
import { StreamError } from '../src/runtime/errors.js';
import * as K from '../src/model/kernels/index.js';

const d = Device.get(0);
const f32 = (a: ArrayLike<number>, shape: number[]) => Tensor.fromArray(d, Float32Array.from(a), shape);
const i32 = (a: ArrayLike<number>, shape: number[]) => Tensor.fromArray(d, Int32Array.from(a), shape);
const host = async (t: Tensor) => Array.from((await t.toArray()) as Float32Array, Number);

afterAll(() => loadNative().setMatmulKernel('auto'));

/** fp64: [log p(target) per row ‖ −Σ p log p per row] of softmax(x / temp); 0 on ignored rows. */
function brute(x: ArrayLike<number>, targets: readonly number[], V: number, temp: number): number[] {
  const T = targets.length;
  const out = new Array<number>(2 * T).fill(0);
  for (let t = 0; t < T; t++) {
    if (targets[t] === -100) continue;
    const z = Array.from({ length: V }, (_, v) => x[t * V + v]! / temp);
    const m = Math.max(...z);
    const lse = m + Math.log(z.reduce((s, zi) => s + Math.exp(zi - m), 0));
    out[t] = z[targets[t]!]! - lse;
    out[T + t] = -z.reduce((s, zi) => s + Math.exp(zi - lse) * (zi - lse), 0);
  }
  return out;
}

// Hand-made rows: a peaked one, a flat one (H = log V), a mixed one, an ignored one, one with a large offset.
const V = 7;
const temp = 0.7;
const targets = [0, 3, 6, -100, 2];
const T = targets.length;
const logits = [
  [9, 0.5, -1, 0, 0.25, -2, 1],
  [0, 0, 0, 0, 0, 0, 0],
  [1.5, -0.5, 2, 0.1, -3, 0.7, 1.2],
  [4, 3, 2, 1, 0, -1, -2],
  [40.5, 41, 39, 40, 40.25, 38, 41.5],
].flat();

function expectClose(got: number[], want: number[], tol: number, label: string) {
  expect(got.length, label).toBe(want.length);
  for (let i = 0; i < want.length; i++)
    expect(Math.abs(got[i]! - want[i]!), `${label}[${i}]: ${got[i]} vs ${want[i]}`).toBeLessThanOrEqual(tol * (1 + Math.abs(want[i]!)));
}

describe('tokenLogprobsEntropy kernel', () => {
  for (const path of ['auto', 'portable'] as const) {
    it(`forward = brute-force fp64 (fast on the ${path} vector path and reference)`, async () => {
      loadNative().setMatmulKernel(path);
      const want = brute(logits, targets, V, temp);
      expect(want[T + 1]).toBeCloseTo(Math.log(V), 12); // the flat row: the entropy of a uniform distribution
      for (const impl of ['fast', 'reference'] as KernelImpl[]) {
        const r = K.tokenLogprobsEntropy(f32(logits, [T, V]), i32(targets, [T]), { temperature: temp, impl });
        expect(r.out.shape).toEqual([2, T]);
        expectClose(await host(r.out), want, impl === 'reference' ? 1e-6 : 3e-6, `${impl} ${path}`);
      }
      // The log-prob half equals tokenLogprobs() bit for bit (the bonus does not move the policy's log-probs).
      const lp = await host(K.tokenLogprobs(f32(logits, [T, V]), i32(targets, [T]), { temperature: temp }));
      const both = await host(K.tokenLogprobsEntropy(f32(logits, [T, V]), i32(targets, [T]), { temperature: temp }).out);
      expect(both.slice(0, T)).toEqual(lp);
    });

    it(`backward = fp64 central differences of d(a·logp + b·H)/dlogits (${path} path)`, async () => {
      loadNative().setMatmulKernel(path);
      const seed = [0.3, -1.2, 0.8, 5, -0.6, 1.1, 0.4, -2.5, 7, 0.9]; // [dlogp ‖ dH]; the ignored row's seeds must not leak
      const f = (x: number[]) => brute(x, targets, V, temp).reduce((s, v, i) => s + seed[i]! * v, 0);
      const h = 1e-6;
      const fd = logits.map((_, j) => {
        const xp = [...logits],
          xm = [...logits];
        xp[j]! += h;
        xm[j]! -= h;
        return (f(xp) - f(xm)) / (2 * h);
      });
      for (let j = 3 * V; j < 4 * V; j++) expect(fd[j]).toBe(0);
      for (const impl of ['fast', 'reference'] as KernelImpl[]) {
        const z = f32(logits, [T, V]),
          tg = i32(targets, [T]);
        const r = K.tokenLogprobsEntropy(z, tg, { temperature: temp, impl });
        const dz = await host(K.tokenLogprobsEntropyBackward(f32(seed, [2, T]), z, tg, r, { temperature: temp, impl }));
        expectClose(dz, fd, 2e-5, `${impl} ${path} dlogits`);
      }
    });
  }

  it('with dH = 0 the backward is the log-prob backward; a target outside the vocabulary fails the stream', async () => {
    const z = f32(logits, [T, V]),
      tg = i32(targets, [T]);
    const dl = [0.5, -1, 2, 3, 0.25];
    const r = K.tokenLogprobsEntropy(z, tg);
    const fused = await host(K.tokenLogprobsEntropyBackward(f32([...dl, 0, 0, 0, 0, 0], [2, T]), z, tg, r));
    const plain = await host(K.tokenLogprobsBackward(f32(dl, [T]), z, tg, K.tokenLogprobsWithLse(z, tg).lse));
    expectClose(fused, plain, 1e-6, 'dH = 0');
    const s = d.newStream();
    try {
      K.tokenLogprobsEntropy(
        Tensor.fromArray(d, Float32Array.from(logits), [T, V], { stream: s }),
        Tensor.fromArray(d, Int32Array.from([0, 7, 0, 0, 0]), [T], { stream: s }),
        {
          stream: s,
        },
      );
      const err = await s.synchronize().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(StreamError);
      expect((err as Error).message).toMatch(/tokenLogprobsEntropy: target 7 at position 1 is outside the vocabulary \[0, 7\)/);
    } finally {
      s.destroy();
    }
    expect(() => K.tokenLogprobsEntropyBackward(f32(dl, [T]), z, tg, r)).toThrow(/dOut/);
  });
});
