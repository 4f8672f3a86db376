/**
 * The per-rank padding trim (src/train/rows.ts localRows) on real ranks
 * (test/fixtures/train/trim-cases.mjs under launch): every strategy's forward runs at its rows'
 * own width (1 + the last target position over them; 1 for a rank whose rows have no target),
 * the logits it computes have that many rows per sequence (the saving is real), and the loss,
 * its stats (entropy, rollout-correction metrics, router aux loss) and every gathered gradient
 * equal those of the untrimmed step (trimPadding: false) within 1e-5 relative, the strategy
 * equivalence tests' fp32 tolerance (dropping the pads changes summation order, nothing else).
 */
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';
import { MOE_TEXT, TEXT, grpoReady } from './helpers/qwen35-configs.js';

const FIXTURE = 'test/fixtures/train/trim-cases.mjs';
const TOL = 1e-5;
const S = 24;
const model = (name: string) => JSON.parse(readFileSync(new URL(`../examples/models/${name}/config.json`, import.meta.url), 'utf8'));
const aux = { output_router_logits: true, router_aux_loss_coef: 0.05 };
const CONFIGS = {
  dense: model('tiny-dense'),
  moe: { ...model('tiny-moe'), ...aux },
  qwen35: grpoReady(TEXT),
  qwen35moe: { ...grpoReady(MOE_TEXT), ...aux },
};
const LORA = { rank: 4, alpha: 8, dropout: 0.1, targetModules: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'], seed: 3 };
type Kind = 'single' | 'fsdp2' | 'megatron';
type Case = readonly [kind: Kind, model: keyof typeof CONFIGS, tp: number, dp: number, ep: number, lora: boolean, loss: 'grpo' | 'ce'];
const CASES: Case[] = [
  ['single', 'dense', 1, 1, 1, false, 'ce'],
  ['single', 'dense', 1, 1, 1, false, 'grpo'],
  ['single', 'dense', 1, 1, 1, true, 'grpo'],
  ['single', 'qwen35', 1, 1, 1, false, 'grpo'],
  ['fsdp2', 'dense', 1, 2, 1, false, 'ce'],
  ['fsdp2', 'dense', 1, 2, 1, false, 'grpo'],
  ['fsdp2', 'dense', 1, 2, 1, true, 'grpo'],
  ['fsdp2', 'moe', 1, 2, 1, false, 'grpo'],
  ['fsdp2', 'qwen35', 1, 2, 1, false, 'grpo'],
  ['fsdp2', 'qwen35moe', 1, 2, 1, false, 'grpo'],
  ['megatron', 'dense', 1, 2, 1, false, 'grpo'],
  ['megatron', 'dense', 2, 1, 1, false, 'grpo'],
  ['megatron', 'dense', 1, 2, 1, true, 'grpo'],
  ['megatron', 'moe', 1, 2, 2, false, 'grpo'],
  ['megatron', 'qwen35', 1, 2, 1, false, 'grpo'],
];

beforeAll(() => ensureParallelBuilt(), 120_000);

let launched: Promise<LaunchRun> | null = null;
function runAll(): Promise<LaunchRun> {
  const args = CASES.map(([kind, m, tp, dp, ep, lora, loss]) => [kind, CONFIGS[m], { tp, dp, ep }, lora ? LORA : null, loss]);
  return (launched ??= launchFixture(2, FIXTURE, [JSON.stringify(args)], {}, 500_000));
}

interface Seen {
  width: number;
  rows: number;
  row0: number;
  logitsRows: number;
}
interface Side {
  seen: Seen[];
  seenUntrimmed: Seen[];
  loss: [number, number];
  tokens: [number, number];
  stats: [Record<string, number>, Record<string, number>];
  gradErr: Record<string, number | string>;
}

/** The width a rank's rows need: 1 + the last target position of rows [row0, row0 + rows) (ROWS in the fixture), 1 when none. */
function expectedWidth(row0: number, rows: number, silentTail: boolean): number {
  const need = [5 + 17 - 1, 3 + 4 - 1, 4 + 6 - 1, 6 + 8 - 1].map((w, r) => (silentTail && r >= 2 ? 1 : w));
  return Math.max(1, ...need.slice(row0, row0 + rows));
}

describe('padding trim: each rank computes its rows at their own width, with the untrimmed loss and gradients', () => {
  it.each(CASES.map((c) => [c.join(' '), c] as const))(
    '%s',
    async (_name, c) => {
      const [kind, m, , dp, , , loss] = c;
      const run = await runAll();
      expect(run.code, run.stderr).toBe(0);
      const index = CASES.indexOf(c);
      const results = run.results.filter((r) => r.case === index) as Array<Record<string, any>>;
      expect(results.map((r) => r.rank).sort()).toEqual(kind === 'single' ? [0] : [0, 1]);
      for (const r of results) {
        for (const silentTail of [false, true]) {
          const side = r[silentTail ? 'silentTail' : 'varied'] as Side;
          const at = `rank ${r.rank}${silentTail ? ', second half without targets' : ''}`;
          // The forward ran at the trimmed width (logits rows = rows x width), and untrimmed at S.
          expect(side.seen.length, at).toBe(1);
          const seen = side.seen[0]!;
          expect(seen.rows, at).toBe(4 / (kind === 'single' ? 1 : dp));
          expect(seen.width, at).toBe(expectedWidth(seen.row0, seen.rows, silentTail));
          expect(seen.logitsRows, at).toBe(seen.rows * seen.width);
          expect(side.seenUntrimmed[0]!.logitsRows, at).toBe(seen.rows * S);
          // Same loss, tokens and stats as the untrimmed step.
          const [got, want] = side.loss;
          expect(Number.isFinite(want) && want !== 0, at).toBe(true);
          expect(Math.abs(got - want) / Math.abs(want), `${at}: loss`).toBeLessThan(TOL);
          expect(side.tokens[0], at).toBe(side.tokens[1]);
          const [st, sf] = side.stats;
          expect(Object.keys(st).sort(), at).toEqual(Object.keys(sf).sort());
          if (loss === 'grpo') expect(sf.entropy, at).toBeGreaterThan(0);
          if (m === 'moe' || m === 'qwen35moe') expect(sf.aux_loss, `${at}: the router aux loss is on`).toBeGreaterThan(0.5);
          for (const [k, v] of Object.entries(sf)) expect(Math.abs(st[k]! - v), `${at}: stat ${k}`).toBeLessThanOrEqual(TOL * Math.max(Math.abs(v), 1e-3));
          const errs = Object.entries(side.gradErr);
          expect(errs.length, at).toBeGreaterThan(4);
          for (const [name, e] of errs) {
            expect(typeof e, `${at}: gradient ${name}`).toBe('number');
            expect(e as number, `${at}: gradient ${name}`).toBeLessThan(TOL);
          }
        }
      }
    },
    520_000,
  );
});
