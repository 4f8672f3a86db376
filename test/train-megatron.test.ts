/**
 * The megatron strategy on real worker ranks (launch) versus the single-device
 * strategy, same seed and global batch: loss, gradients gathered to HF names, the
 * gradient norm and parameters after one AdamW step within 1e-5 relative per tensor
 * (max|a-b| / max|b|), for tp2 and tp2dp2 on tiny-dense and tiny-moe, ep2 and tp2ep2
 * on tiny-moe. TP-replicated gradients are checked bit-identical across TP ranks;
 * loadState → gatherState round-trips moments exactly. Errors reject on every rank.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';

const FIXTURE = 'test/fixtures/train/megatron-cases.mjs';
const TOL = 1e-5;

beforeAll(() => ensureParallelBuilt(), 120_000);

function check(run: LaunchRun, nproc: number, layout: string, tp: number): void {
  expect(run.code, run.stderr).toBe(0);
  expect(run.results.map((r) => r.rank)).toEqual(Array.from({ length: nproc }, (_, i) => i));
  const r0 = run.results[0]! as Record<string, any>;
  expect(r0.layout).toBe(layout);
  expect(Math.abs(r0.loss - r0.refLoss) / Math.abs(r0.refLoss)).toBeLessThan(TOL);
  expect(r0.tokens).toBe(r0.refTokens);
  expect(Math.abs(r0.norm - r0.refNorm) / r0.refNorm).toBeLessThan(TOL);
  for (const what of ['gradErr', 'paramErr'] as const) {
    const errs = r0[what] as Record<string, number | string>;
    expect(Object.keys(errs).length).toBeGreaterThan(10);
    for (const [name, e] of Object.entries(errs)) {
      expect(typeof e, `${what} ${name}`).toBe('number');
      expect(e as number, `${what} ${name}`).toBeLessThan(TOL);
    }
  }
  for (const r of run.results as Array<Record<string, any>>) {
    expect(r.loss).toBe(r0.loss);
    expect(Math.abs((r.forwardLoss as number) - (r.loss as number)) / Math.abs(r.loss as number)).toBeLessThan(1e-6);
    expect(r.forwardKeptGrads).toBe(true);
    expect(r.norm).toBe(r0.norm);
    expect(r.loadStateExact, `rank ${r.rank} loadState`).toBe(true);
    // TP-replicated gradients (norms, embedding, router, experts) are bit-identical on every TP rank.
    const peer = run.results.find((x) => (x as Record<string, any>).tpRank === 0 && Math.floor(x.rank / tp) === Math.floor(r.rank / tp)) as Record<string, any>;
    expect(Object.keys(r.hashes).length).toBeGreaterThan(5);
    expect(r.hashes).toEqual(peer.hashes);
  }
}

/**
 * The cases of one rank count share a launch (the fixture runs them in turn, each with
 * strategies of its own, and tags each RESULT with the case's index): starting the ranks and
 * loading the package cost more than a case. The error cases keep a launch of their own.
 */
const CASES: Record<number, Array<[string, number, number, number]>> = {
  2: [
    ['dense', 2, 1, 1],
    ['moe', 2, 1, 1],
    ['moe', 1, 2, 2],
  ],
  4: [
    ['dense', 2, 2, 1],
    ['moe', 2, 2, 1],
    ['moe', 2, 2, 2],
  ],
};
const launched = new Map<number, Promise<LaunchRun>>();
async function runCase(nproc: number, args: [string, number, number, number]): Promise<LaunchRun> {
  const list = CASES[nproc]!;
  const index = list.findIndex((c) => c.join(' ') === args.join(' '));
  expect(index, `case ${args.join(' ')} on ${nproc} ranks`).toBeGreaterThanOrEqual(0);
  if (!launched.has(nproc)) launched.set(nproc, launchFixture(nproc, FIXTURE, [JSON.stringify(list)], {}, 170_000));
  const run = await launched.get(nproc)!;
  return { ...run, results: run.results.filter((r) => r.case === index) };
}

describe('megatron strategy vs single device', () => {
  it.each([
    ['dense', 2, 1, 1, 2, 'tp2'],
    ['moe', 2, 1, 1, 2, 'tp2'],
    ['moe', 1, 2, 2, 2, 'ep2'],
    ['dense', 2, 2, 1, 4, 'tp2dp2'],
    ['moe', 2, 2, 1, 4, 'tp2dp2'],
    ['moe', 2, 2, 2, 4, 'tp2ep2'],
  ] as const)(
    'tiny-%s tp=%i dp=%i ep=%i on %i ranks (%s)',
    async (which, tp, dp, ep, nproc, layout) => {
      const run = await runCase(nproc, [which, tp, dp, ep]);
      check(run, nproc, layout, tp);
    },
    180_000,
  );

  it('bad sizes or parameters reject on every rank with a message naming them', async () => {
    const run = await launchFixture(2, FIXTURE, ['errors']);
    expect(run.code, run.stderr).toBe(0);
    expect(run.results).toHaveLength(2);
    for (const r of run.results as Array<Record<string, any>>) {
      expect(r.errors.world.code).toBe('ASCENT_INVALID_ARGUMENT');
      expect(r.errors.world.message).toMatch(/world size 2 != tp \(2\) x dp \(2\) = 4.*--nproc 4/);
      expect(r.errors.epDp.message).toMatch(/ep=4 does not divide dp=2/);
      expect(r.errors.missing.message).toMatch(/model\.embed_tokens\.weight is missing/);
    }
  }, 60_000);
});
