/**
 * The router load-balancing loss (output_router_logits true) under fsdp2 and megatron on real
 * worker ranks (test/fixtures/train/router-aux-cases.mjs under launch) equals the single-device
 * strategy on the full batch: global-batch statistics across dp / ep, not per-rank ones (the
 * batch's padded last row leaves the ranks different token counts), and tp ranks counting their
 * shared tokens once. Loss, aux_loss and every gathered gradient within 1e-5 relative (the
 * strategy equivalence tests' tolerance), on tiny qwen3_moe and qwen3_5_moe; the flag-off router
 * gradients are far outside that tolerance, so a dropped or double-counted term fails.
 */
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';
import { MOE_TEXT } from './helpers/qwen35-configs.js';

const FIXTURE = 'test/fixtures/train/router-aux-cases.mjs';
const TOL = 1e-5;
const COEF = 0.05;
const CONFIGS = {
  qwen3_moe: {
    ...JSON.parse(readFileSync(new URL('../examples/models/tiny-moe/config.json', import.meta.url), 'utf8')),
    output_router_logits: true,
    router_aux_loss_coef: COEF,
  },
  qwen3_5_moe: { ...MOE_TEXT, vocab_size: 64, output_router_logits: true, router_aux_loss_coef: COEF },
};

beforeAll(() => ensureParallelBuilt(), 120_000);

type Case = readonly [kind: string, model: keyof typeof CONFIGS, tp: number, dp: number, ep: number];
/**
 * The cases of one rank count share a launch (the fixture runs them in turn, each with
 * strategies of its own, and tags each RESULT with the case's index): starting the ranks and
 * loading the package cost more than a case.
 */
const CASES: Record<number, Case[]> = {
  2: [
    ['fsdp2', 'qwen3_moe', 1, 2, 1],
    ['fsdp2', 'qwen3_5_moe', 1, 2, 1],
    ['megatron', 'qwen3_moe', 1, 2, 2],
    ['megatron', 'qwen3_5_moe', 1, 2, 2],
    ['megatron', 'qwen3_moe', 2, 1, 1],
    ['megatron', 'qwen3_5_moe', 2, 1, 1],
  ],
  4: [['megatron', 'qwen3_moe', 2, 2, 2]],
};
const launched = new Map<number, Promise<LaunchRun>>();
async function runCase(nproc: number, c: Case): Promise<LaunchRun> {
  const list = CASES[nproc]!;
  const index = list.findIndex((x) => x.join(' ') === c.join(' '));
  expect(index, `case ${c.join(' ')} on ${nproc} ranks`).toBeGreaterThanOrEqual(0);
  if (!launched.has(nproc)) {
    const args = list.map(([kind, model, tp, dp, ep]) => [kind, CONFIGS[model], tp, dp, ep]);
    launched.set(nproc, launchFixture(nproc, FIXTURE, [JSON.stringify(args)], {}, 250_000));
  }
  const run = await launched.get(nproc)!;
  return { ...run, results: run.results.filter((r) => r.case === index) };
}

describe('router aux loss: fsdp2 / megatron vs single device on the full batch', () => {
  it.each([
    ['fsdp2', 'qwen3_moe', 1, 2, 1, 2, 'dp2'],
    ['fsdp2', 'qwen3_5_moe', 1, 2, 1, 2, 'dp2'],
    ['megatron', 'qwen3_moe', 1, 2, 2, 2, 'ep2'],
    ['megatron', 'qwen3_5_moe', 1, 2, 2, 2, 'ep2'],
    ['megatron', 'qwen3_moe', 2, 1, 1, 2, 'tp2'],
    ['megatron', 'qwen3_5_moe', 2, 1, 1, 2, 'tp2'],
    ['megatron', 'qwen3_moe', 2, 2, 2, 4, 'tp2ep2'],
  ] as const)(
    '%s %s tp=%i dp=%i ep=%i on %i ranks (%s)',
    async (kind, model, tp, dp, ep, nproc, layout) => {
      const run = await runCase(nproc, [kind, model, tp, dp, ep]);
      expect(run.code, run.stderr).toBe(0);
      expect(run.results.map((r) => r.rank)).toEqual(Array.from({ length: nproc }, (_, i) => i));
      const r0 = run.results[0] as Record<string, any>;
      if (kind === 'megatron') expect(r0.layout).toBe(layout);
      expect(r0.refAux).toBeGreaterThan(0.5);
      expect(Math.abs(r0.refLoss - (r0.baseLoss + COEF * r0.refAux))).toBeLessThan(TOL * r0.refLoss);
      for (const r of run.results as Array<Record<string, any>>) {
        expect(Math.abs(r.aux - r0.refAux) / r0.refAux, `rank ${r.rank} aux_loss`).toBeLessThan(TOL);
        expect(Math.abs(r.loss - r0.refLoss) / r0.refLoss, `rank ${r.rank} loss`).toBeLessThan(TOL);
      }
      const errs = r0.gradErr as Record<string, number | string>;
      expect(Object.keys(errs).length).toBeGreaterThan(10);
      for (const [name, e] of Object.entries(errs)) {
        expect(typeof e, name).toBe('number');
        expect(e as number, `gradient ${name}`).toBeLessThan(TOL);
      }
      const off = Object.entries(r0.routerOffErr as Record<string, number>);
      expect(off.length).toBeGreaterThan(0);
      for (const [name, e] of off) expect(e, `${name}: the aux term moves the router gradient`).toBeGreaterThan(1e3 * TOL);
    },
    270_000,
  );
});
