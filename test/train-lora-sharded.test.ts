/**
 * LoRA on the sharded strategies on real worker ranks (launch) versus the single-device
 * LoRA strategy, same seed, batch and adapters (B random, non-zero): loss, adapter
 * gradients gathered to PEFT names and adapters after one AdamW step within 1e-5
 * relative per tensor (max|a-b| / max|b|); gradients exist for the adapters only; every
 * base weight stays bit-identical; loraState() equals the adapters of
 * gatherState('params') and round-trips through loadState. Cases: megatron tp2 (dense
 * with dropout on every projection, MoE with attention + fused-expert targets), ep2 and
 * tp2dp2 on MoE / dense, fsdp2 on 4 ranks (dense with dropout, MoE).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';

const FIXTURE = 'test/fixtures/train/lora-cases.mjs';
const TOL = 1e-5;

beforeAll(() => ensureParallelBuilt(), 120_000);

function check(run: LaunchRun, nproc: number, layout: string): void {
  expect(run.code, run.stderr).toBe(0);
  expect(run.results.map((r) => r.rank)).toEqual(Array.from({ length: nproc }, (_, i) => i));
  const r0 = run.results[0]! as Record<string, any>;
  expect(r0.layout).toBe(layout);
  expect(Math.abs(r0.loss - r0.refLoss) / Math.abs(r0.refLoss)).toBeLessThan(TOL);
  expect(r0.tokens).toBe(r0.refTokens);
  expect(Math.abs(r0.norm - r0.refNorm) / r0.refNorm).toBeLessThan(TOL);
  expect(r0.refBaseExact).toBe(true);
  for (const what of ['gradErr', 'adapterErr'] as const) {
    const errs = r0[what] as Record<string, number | string>;
    expect(Object.keys(errs).sort()).toEqual(r0.adapterNames);
    for (const [name, e] of Object.entries(errs)) {
      expect(typeof e, `${what} ${name}`).toBe('number');
      expect(e as number, `${what} ${name}`).toBeLessThan(TOL);
    }
  }
  for (const r of run.results as Array<Record<string, any>>) {
    expect(r.loss).toBe(r0.loss);
    expect(r.norm).toBe(r0.norm);
    expect(r.adapterNames.length).toBeGreaterThan(5);
    expect(r.gradNames, `rank ${r.rank}: gradients of the adapters only`).toEqual(r.adapterNames);
    expect(r.movedAdapters, `rank ${r.rank}: every adapter moved`).toBe(r.adapterNames.length);
    expect(r.baseExact, `rank ${r.rank}: base weights bit-identical`).toBe(true);
    expect(r.loraStateExact, `rank ${r.rank}: loraState`).toBe(true);
    expect(r.loadExact, `rank ${r.rank}: loadState round trip`).toBe(true);
  }
}

/**
 * The cases of one rank count share a launch (the fixture runs them in turn, each with
 * strategies of its own, and tags each RESULT with the case's index): starting the ranks and
 * loading the package cost more than a case.
 */
const CASES: Record<number, Array<Array<string | number>>> = {
  2: [
    ['megatron', 'dense', 2, 1, 1],
    ['megatron', 'moe', 2, 1, 1],
    ['megatron', 'moe', 1, 2, 2],
  ],
  4: [
    ['megatron', 'dense', 2, 2, 1],
    ['megatron', 'moe', 2, 2, 2],
    ['fsdp2', 'dense'],
    ['fsdp2', 'moe'],
  ],
};
const launched = new Map<number, Promise<LaunchRun>>();
async function runCase(nproc: number, args: Array<string | number>): Promise<LaunchRun> {
  const list = CASES[nproc]!;
  const index = list.findIndex((c) => c.join(' ') === args.join(' '));
  expect(index, `case ${args.join(' ')} on ${nproc} ranks`).toBeGreaterThanOrEqual(0);
  if (!launched.has(nproc)) launched.set(nproc, launchFixture(nproc, FIXTURE, [JSON.stringify(list)], {}, 170_000));
  const run = await launched.get(nproc)!;
  return { ...run, results: run.results.filter((r) => r.case === index) };
}

describe('LoRA on sharded strategies vs single device', () => {
  it.each([
    ['dense', 2, 1, 1, 2, 'tp2'],
    ['moe', 2, 1, 1, 2, 'tp2'],
    ['moe', 1, 2, 2, 2, 'ep2'],
    ['dense', 2, 2, 1, 4, 'tp2dp2'],
    ['moe', 2, 2, 2, 4, 'tp2ep2'],
  ] as const)(
    'megatron tiny-%s tp=%i dp=%i ep=%i on %i ranks (%s)',
    async (which, tp, dp, ep, nproc, layout) => {
      const run = await runCase(nproc, ['megatron', which, tp, dp, ep]);
      check(run, nproc, layout);
    },
    180_000,
  );

  it.each(['dense', 'moe'] as const)(
    'fsdp2 tiny-%s on 4 ranks',
    async (which) => {
      const run = await runCase(4, ['fsdp2', which]);
      check(run, 4, 'dp4');
    },
    180_000,
  );
});
