import { describe, expect, it } from 'vitest';
// The bench spawns its actors from dist/, as `npm run bench` does.
import { rowSpecs, runTrainerBench } from '../dist/bench/trainer.js';

describe('trainer benchmark harness', () => {
  it('rows for every strategy and layout; the step-1 loss of every row of a model agrees', async () => {
    const r = await runTrainerBench({ steps: 1, models: ['moe'], ranks: [1, 4] });
    expect(r.rows.map((x) => `${x.strategy}:${x.layout}`)).toEqual(['single:single', 'fsdp2:dp4', 'megatron:tp2dp2', 'megatron:dp4ep2']);
    expect(r.lossMismatches).toEqual([]);
    for (const row of r.rows) {
      expect(row.msPerStep).toBeGreaterThan(0);
      expect(row.commShare).toBeGreaterThanOrEqual(0);
      expect(row.commShare).toBeLessThanOrEqual(1);
      if (row.ranks > 1) expect(row.commShare, row.layout).toBeGreaterThan(0);
      expect(Math.abs(row.lossStep1 - r.rows[0]!.lossStep1) / r.rows[0]!.lossStep1).toBeLessThan(1e-5);
    }
    expect(rowSpecs('dense', [16]).map((s) => s.layout)).toEqual(['dp16', 'tp2dp8']);
  }, 180_000);
});
