/**
 * GRPO's entropy bonus (entropyCoeff): the aggregation of the per-token entropies with each
 * lossType's normalisation against a hand computation; the GRPO loss on the single-device
 * strategy with the bonus on equals the policy loss minus coeff × the aggregated entropy of
 * brute-force fp64 entropies of the model's logits, for every lossType, and its gradient is
 * the policy gradient plus the entropy term's; with entropyCoeff 0 the loss and gradients are
 * bit-identical to the loss as it was before the bonus existed (tokenLogprobs + grpoObjective);
 * and fsdp2 dp2 and megatron tp2 on real ranks equal the single device with the bonus on.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { Tensor } from '../src/runtime/device/tensor.js';
import { loadModelConfig } from '../src/model/config.js';
import { initialParams } from '../src/model/params.js';
import { makeBatch } from '../src/data/synthetic-task.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import { grpoLoss } from '../src/grpo/loss.js';
import { grpoObjective, LOSS_TYPES, type LossType } from '../src/grpo/objective.js';
import { entropyBonus } from '../src/grpo/entropy-bonus.js';
import { tokenLogprobs } from '../src/train/logprobs.js';
import { localTokens } from '../src/train/rows.js';
import { tokenLogprobsEntropy } from '../src/train/logprobs-entropy.js';
import type { LossFn } from '../src/train/strategy.js';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';
import { maxRelOverTensors } from './helpers/grad-compare.js';

/** c_t of each lossType for a token of a row of `len` response tokens, written out (objective.ts's table). */
function handNorm(lossType: LossType, len: number, s: { rows: number; local: number; B: number; N: number; L: number }): number {
  if (lossType === 'grpo') return 1 / (len * s.B);
  if (lossType === 'bnpo') return s.rows / s.B / s.local;
  if (lossType === 'dr_grpo') return 1 / (s.B * s.L);
  return 1 / s.N;
}

describe('entropy bonus aggregation', () => {
  it('−coeff · Σ c_t·H_t with the normalisation of each lossType, by hand', () => {
    // Two rows of 4 positions: row 0 has 3 response tokens, row 1 one; global batch of 4 rows and 10 tokens.
    const mask = [0, 1, 1, 1, 0, 1, 0, 0];
    const H = [9, 0.5, 1.25, 2, 9, 0.75, 9, 9]; // 9 off the mask: must not count
    const inp = { rows: 2, seqLen: 4, mask, entropy: H, globalRows: 4, globalTokens: 10 };
    const want: Record<LossType, number> = {
      grpo: -0.1 * ((0.5 + 1.25 + 2) / (3 * 4) + 0.75 / (1 * 4)),
      bnpo: (-0.1 * ((2 / 4) * (0.5 + 1.25 + 2 + 0.75))) / 4,
      dr_grpo: (-0.1 * (0.5 + 1.25 + 2 + 0.75)) / (4 * 5),
      dapo: (-0.1 * (0.5 + 1.25 + 2 + 0.75)) / 10,
    };
    for (const lossType of LOSS_TYPES) {
      const r = entropyBonus(inp, { lossType, maxCompletionLength: 5 }, 0.1);
      expect(r.value, lossType).toBeCloseTo(want[lossType], 14);
      expect(r.sum).toBeCloseTo(4.5, 14);
      // d/dH_t: the same c_t, 0 off the mask.
      const c0 = handNorm(lossType, 3, { rows: 2, local: 4, B: 4, N: 10, L: 5 }),
        c1 = handNorm(lossType, 1, { rows: 2, local: 4, B: 4, N: 10, L: 5 });
      expect([...r.weights].map((w) => +w.toFixed(15))).toEqual([0, -0.1 * c0, -0.1 * c0, -0.1 * c0, 0, -0.1 * c1, 0, 0].map((w) => +w.toFixed(15)));
    }
    expect(() => entropyBonus(inp, { lossType: 'dapo', maxCompletionLength: 5 }, -0.01)).toThrow(
      /entropyCoeff must be a finite number >= 0 but is -0.01\. HINT/,
    );
    expect(() => entropyBonus({ ...inp, entropy: [1] }, { lossType: 'dapo', maxCompletionLength: 5 }, 0.1)).toThrow(
      /entropy has 1 and mask 8 entries; expected rows x seqLen = 8/,
    );
  });
});

describe('GRPO loss with the entropy bonus on the single-device strategy', () => {
  const cfg = loadModelConfig(new URL('../examples/models/tiny-dense/config.json', import.meta.url).pathname);
  const device = Device.get(0);
  const b = makeBatch(5, 4, 24);
  const temperature = 0.8;
  const adv = Float32Array.from([1.2, -0.4, 0.7, -1.5]);
  const V = cfg.vocabSize;

  type Grads = Map<string, { data: Float32Array }>;

  /** The current log-probs and brute-force fp64 entropies of softmax(logits / temperature) per token. */
  async function probe(s: SingleDeviceStrategy): Promise<{ logp: Float32Array; H: Float64Array }> {
    let logp = new Float32Array(0);
    const H = new Float64Array(b.targets.length);
    const capture: LossFn = async (tape, logits, rows) => {
      const tgt = tape.own(Tensor.fromArray(device, rows.targets, [rows.targets.length], { stream: tape.stream }));
      const lp = tokenLogprobs(tape, logits, tgt, temperature);
      logp = (await lp.value.toArray({ stream: tape.stream })) as Float32Array;
      const z = (await logits.value.toArray({ stream: tape.stream })) as Float32Array;
      for (let t = 0; t < H.length; t++) {
        const row = Array.from(z.subarray(t * V, (t + 1) * V), (x) => x / temperature);
        const m = Math.max(...row);
        const lse = m + Math.log(row.reduce((a, x) => a + Math.exp(x - m), 0));
        H[t] = -row.reduce((a, x) => a + Math.exp(x - lse) * (x - lse), 0);
      }
      return { perToken: lp, weights: new Float32Array(lp.value.numel) };
    };
    // At the batch's full width: logp and H are [B·S] arrays, as the losses read global per-token arrays.
    await s.forward({ ...b, trimPadding: false }, capture);
    return { logp, H };
  }

  it('loss = policy loss − coeff · aggregated entropy for every lossType; gradient = policy gradient + the entropy term', async () => {
    const s = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 3));
    const grads = async () => {
      const g = await s.gatherState('grads');
      s.zeroGrad();
      return g;
    };
    try {
      s.zeroGrad();
      const { logp, H } = await probe(s);
      const old = logp.map((x, i) => x + 0.3 * Math.sin(i)); // ratios away from 1, some clipped
      const coeff = 0.05;
      let N = 0;
      for (const t of b.targets) if (t !== -100) N++;
      for (const lossType of LOSS_TYPES) {
        const o = { clipLow: 0.2, clipHigh: 0.28, beta: 0, temperature, lossType, maxCompletionLength: 16 };
        const p = await s.forwardBackward(b, grpoLoss({ oldLogprobs: old, advantages: adv }, o));
        const gPolicy = await grads();
        const r = await s.forwardBackward(b, grpoLoss({ oldLogprobs: old, advantages: adv }, { ...o, entropyCoeff: coeff }));
        const gBonus = await grads();
        // The aggregated entropy by hand, from the brute-force entropies.
        let agg = 0,
          sumH = 0;
        const eWeights = new Float32Array(2 * b.targets.length);
        for (let row = 0; row < b.batch; row++) {
          let len = 0;
          for (let t = 0; t < b.seqLen; t++) if (b.targets[row * b.seqLen + t] !== -100) len++;
          const c = handNorm(lossType, len, { rows: b.batch, local: N, B: b.batch, N, L: 16 });
          for (let t = 0; t < b.seqLen; t++) {
            const i = row * b.seqLen + t;
            if (b.targets[i] === -100) continue;
            agg += c * H[i]!;
            sumH += H[i]!;
            eWeights[b.targets.length + i] = -coeff * c;
          }
        }
        expect(r.loss, lossType).toBeCloseTo(p.loss - coeff * agg, 6);
        expect(Math.abs(coeff * agg), lossType).toBeGreaterThan(1e-3); // the bonus is not negligible here
        expect(r.stats!.entropy! / r.stats!.tokens!, lossType).toBeCloseTo(sumH / N, 5);
        expect(r.tokens).toBe(N); // every response token carries a weight (the entropy term), counted once
        // The entropy term's gradient alone, through the same op with the log-prob half unseeded.
        const entropyOnly: LossFn = (tape, logits, rows) => ({ perToken: tokenLogprobsEntropy(tape, logits, rows.targets, temperature), weights: eWeights });
        await s.forwardBackward({ ...b, trimPadding: false }, entropyOnly); // eWeights are [2·B·S]
        const gEntropy = await grads();
        const sum: Grads = new Map([...gPolicy].map(([n, g]) => [n, { data: g.data.map((x, i) => x + gEntropy.get(n)!.data[i]!) }]));
        expect(maxRelOverTensors(gBonus, sum), lossType).toBeLessThan(1e-5);
        expect(maxRelOverTensors(gBonus, gPolicy), lossType).toBeGreaterThan(1e-3);
      }
    } finally {
      s.release();
    }
  });

  it('entropyCoeff 0: loss and gradients bit-identical to the loss before the bonus (tokenLogprobs + grpoObjective); a negative coefficient is refused', async () => {
    const s = SingleDeviceStrategy.create(cfg, device, initialParams(cfg, 3));
    try {
      s.zeroGrad();
      const { logp } = await probe(s);
      const old = logp.map((x, i) => x + 0.3 * Math.cos(i));
      const o = { clipLow: 0.2, clipHigh: 0.28, beta: 0, temperature, lossType: 'grpo' as const, maxCompletionLength: 16 };
      // The loss exactly as it was: one log-prob kernel, the objective's weights as the seed.
      const before: LossFn = async (tape, logits, rows, global) => {
        const tgt = tape.own(Tensor.fromArray(device, rows.targets, [rows.targets.length], { stream: tape.stream }));
        const lp = tokenLogprobs(tape, logits, tgt, temperature);
        const hostLp = (await lp.value.toArray({ stream: tape.stream })) as Float32Array;
        let N = 0;
        for (const t of global.targets) if (t !== -100) N++;
        const res = grpoObjective(
          {
            rows: rows.rows,
            seqLen: rows.seqLen,
            mask: Array.from(rows.targets, (t) => t !== -100),
            logp: hostLp,
            oldLogp: localTokens(rows, old), // the rows' trimmed width, as grpoLoss reads it
            advantages: adv,
            globalRows: global.batch,
            globalTokens: N,
          },
          {
            lossType: 'grpo',
            epsilon: 0.2,
            epsilonHigh: 0.28,
            delta: null,
            importanceSamplingLevel: 'token',
            beta: 0,
            klEstimator: 'k3',
            maxCompletionLength: 16,
          },
        );
        return { perToken: lp, weights: Float32Array.from(res.weights), value: res.value };
      };
      const want = await s.forwardBackward(b, before);
      const gWant = await s.gatherState('grads');
      s.zeroGrad();
      const got = await s.forwardBackward(b, grpoLoss({ oldLogprobs: old, advantages: adv }, { ...o, entropyCoeff: 0 }));
      const gGot = await s.gatherState('grads');
      s.zeroGrad();
      expect(got.loss).toBe(want.loss);
      expect(got.tokens).toBe(want.tokens);
      expect(got.stats!.entropy).toBeUndefined();
      for (const [n, g] of gWant) expect(Buffer.from(gGot.get(n)!.data.buffer).equals(Buffer.from(g.data.buffer)), n).toBe(true);
      await expect(s.forwardBackward(b, grpoLoss({ advantages: adv }, { ...o, entropyCoeff: -1 }))).rejects.toThrow(
        /entropyCoeff must be a finite number >= 0 but is -1\. HINT: use 0/,
      );
    } finally {
      s.release();
    }
  });
});

describe('entropy bonus on the parallel strategies', () => {
  beforeAll(() => ensureParallelBuilt(), 120_000);

  it('fsdp2 dp2 and megatron tp2 equal the single device (loss, entropy, gradients)', async () => {
    const run = await launchFixture(2, 'test/fixtures/train/entropy-cases.mjs', ['fsdp2,megatron'], {}, 110_000);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const r0 = run.results[0]!;
    for (const [k, layout] of [
      ['fsdp2', 'dp2'],
      ['megatron', 'tp2'],
    ] as const) {
      const x = r0[k] as { layout: string; lossRel: number; entropyRel: number; gradsRel: number; bonus: number; tokens: number[] };
      expect(x.layout).toBe(layout);
      expect(x.lossRel, k).toBeLessThan(1e-5);
      expect(x.entropyRel, k).toBeLessThan(1e-5);
      expect(x.gradsRel, k).toBeLessThan(1e-5);
      expect(x.tokens[0], k).toBe(x.tokens[1]);
      expect(Math.abs(x.bonus), k).toBeGreaterThan(1e-3);
    }
  }, 120_000);
});
