/**
 * The rollout engine on Qwen3.5 (dense `qwen3_5` and `qwen3_5_moe`) above tp 1, on real
 * tensor-parallel ranks (test/fixtures/rollout/engine-tp-qwen35.mjs under launch): every GDN
 * layer split by heads (q / k / v channels of in_proj_qkv and conv1d, z / b / a, dt_bias,
 * A_log, out_proj row parallel), the gated full attention and the MoE (experts and shared
 * expert) as for Qwen3. Prefill logits and log-probs equal a tp-1 engine on the same weights
 * within 1e-4; greedy and seeded-sampling generation of a ragged batch (rows shorter than
 * the conv window included) give the same tokens, on every rank; each rank holds less than the
 * whole model. tp 4 runs on a variant with 4 key heads (the shared tiny config has 2); a tp
 * that does not divide the GDN heads is refused with a ConfigError saying what to do.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { ConfigError } from '../src/runtime/errors.js';
import type { Communicator } from '../src/runtime/comm/comm.js';
import { RolloutEngine } from '../src/rollout/index.js';
import { groupSlots } from '../src/rollout/weight-slots.js';
import { parseModelConfig } from '../src/model/config.js';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';
import { MOE_TEXT, TEXT } from './helpers/qwen35-configs.js';

type Gen = { tokens: number[][]; logprobs: number[][]; finishReasons: string[] };
type Out = { logits: number[][]; logprobs: number[][]; greedy: Gen; sampled: Gen };
type RankOut = { rank: number; shard: { tpSize: number; tpRank: number; gdnValueHeadStart: number }; bytes: number; oneBytes: number; got: Out; want: Out };

const withKeyHeads = <T extends object>(text: T, n: number) => ({ ...text, linear_num_key_heads: n });
const CASES = [
  { which: 'dense', tp: 2, text: TEXT, source: 'device' },
  { which: 'moe', tp: 2, text: MOE_TEXT, source: 'host' },
  { which: 'dense (4 key heads)', tp: 4, text: withKeyHeads(TEXT, 4), source: 'host' },
  { which: 'moe (4 key heads)', tp: 4, text: withKeyHeads(MOE_TEXT, 4), source: 'device' },
] as const;

// The cases of one tp run one after the other in one launch of tp ranks (starting the ranks costs
// more than a case); each test reads its own case's RESULT lines.
const launches = new Map<number, Promise<LaunchRun>>();
function launchOf(tp: number): Promise<LaunchRun> {
  let run = launches.get(tp);
  if (!run) {
    const cases = CASES.filter((c) => c.tp === tp).map((c) => ({ key: c.which, text: c.text, source: c.source }));
    run = launchFixture(tp, 'test/fixtures/rollout/engine-tp-qwen35.mjs', [JSON.stringify(cases)], {}, 55_000 * cases.length);
    launches.set(tp, run);
  }
  return run;
}

const maxDiff = (a: number[][], b: number[][]) => {
  expect(a.map((r) => r.length)).toEqual(b.map((r) => r.length));
  return Math.max(...a.map((r, i) => Math.max(...r.map((v, t) => Math.abs(v - b[i]![t]!)))));
};

describe('rollout engine, qwen3.5 on real tensor-parallel ranks (launch)', () => {
  beforeAll(() => ensureParallelBuilt(), 120_000);

  it.each(CASES)(
    '$which at tp $tp (weights from $source): logits and log-probs equal tp 1 within 1e-4, same greedy and sampled tokens',
    async ({ which, tp, text }) => {
      const run = await launchOf(tp);
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      const results = run.results.filter((r) => r.key === which) as unknown as RankOut[];
      expect(results.map((r) => r.rank)).toEqual(Array.from({ length: tp }, (_, i) => i));
      const Hv = text.linear_num_value_heads;
      for (const r of results) {
        expect([r.shard.tpSize, r.shard.tpRank, r.shard.gdnValueHeadStart]).toEqual([tp, r.rank, (r.rank * Hv) / tp]);
        // A rank holds its share of the weights (embedding, norms and router are replicated).
        expect(r.bytes).toBeLessThan(r.oneBytes * 0.75);
        expect(maxDiff(r.got.logits, r.want.logits)).toBeLessThan(1e-4);
        expect(maxDiff(r.got.logprobs, r.want.logprobs)).toBeLessThan(1e-4);
        expect(r.got.greedy.tokens).toEqual(r.want.greedy.tokens);
        expect(r.got.greedy.finishReasons).toEqual(r.want.greedy.finishReasons);
        expect(maxDiff(r.got.greedy.logprobs, r.want.greedy.logprobs)).toBeLessThan(1e-4);
        expect(r.got.sampled.tokens).toEqual(r.want.sampled.tokens);
        expect(maxDiff(r.got.sampled.logprobs, r.want.sampled.logprobs)).toBeLessThan(1e-4);
        // Every rank returns rank 0's tokens.
        expect(r.got).toEqual(results[0]!.got);
      }
      // Not vacuous: rows generate different tokens, and the log-probs are far from uniform.
      const g = results[0]!.want.greedy.tokens;
      expect(new Set(g.map((t) => t.join(','))).size).toBeGreaterThan(1);
      const lp = results[0]!.want.logprobs.flat();
      expect(Math.max(...lp) - Math.min(...lp)).toBeGreaterThan(1);
    },
    // The first test of a tp waits for the launch running both of its cases.
    115_000,
  );
});

describe('rollout engine, qwen3.5: a tp the GDN heads do not split into is refused', () => {
  it.each([
    ['dense', TEXT],
    ['moe', MOE_TEXT],
  ] as const)('%s: tp 4 with 2 key heads is one ConfigError saying why and what to do', (_, text) => {
    const cfg = parseModelConfig(text);
    const tp = { size: 4, rank: 0 } as unknown as Communicator;
    let err: unknown = null;
    try {
      RolloutEngine.create(cfg, { device: Device.get(0), tp, maxSeqLen: 16 }).release();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(
      new RegExp(
        `cannot run ${cfg.modelType} at tensor parallel size 4: .*Gated DeltaNet.* does not divide linear_num_key_heads \\(2\\)\\. HINT: use a tp size that divides`,
      ),
    );
    expect(() => groupSlots(cfg, 4)).toThrow(ConfigError);
  });

  it('qwen3.5-moe: a shared expert width tp does not divide is refused the same way', () => {
    const cfg = parseModelConfig({ ...MOE_TEXT, shared_expert_intermediate_size: 10 });
    expect(() => groupSlots(cfg, 4)).toThrow(/does not divide linear_num_key_heads \(2\) or shared_expert_intermediate_size \(10\)/);
    expect(() => groupSlots(parseModelConfig({ ...withKeyHeads(MOE_TEXT, 4), shared_expert_intermediate_size: 10 }), 4)).toThrow(ConfigError);
    expect(groupSlots(cfg, 2)).toHaveLength(2);
  });
});
