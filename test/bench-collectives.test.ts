import { describe, expect, it } from 'vitest';
// The bench spawns its actor module from dist/, as `npm run bench` does.
import { busFactor, runCollectivesBench, trafficBytes } from '../dist/bench/collectives.js';

describe('collectives benchmark harness', () => {
  it('produces nccl-tests rows with #wrong = 0 and consistent bandwidth columns', async () => {
    const r = await runCollectivesBench(['--ranks', '3', '--min-bytes', '1024', '--max-bytes', '65536', '--step', '64']);
    expect(r.baselines.streamCopyGBs).toBeGreaterThan(0);
    expect(new Set(r.rows.map((x) => x.op))).toEqual(new Set(['allReduce', 'allGather', 'reduceScatter', 'broadcast', 'allToAll']));
    for (const row of r.rows) {
      expect(row.wrong, `${row.op} ${row.bytes}`).toBe(0);
      expect(row.timeUs).toBeGreaterThan(0);
      expect(row.busbwGBs).toBeCloseTo(row.algbwGBs * busFactor(row.op, 3), 2);
      expect(row.efficiency).toBeCloseTo(trafficBytes(row.op, row.bytes, 3) / (row.timeUs * 1e3) / r.baselines.streamCopyGBs, 2);
    }
  }, 120_000);

  it('rejects bad flags with a clear message', async () => {
    await expect(runCollectivesBench(['--ranks', 'zero'])).rejects.toThrow(/Expected an integer >= 1 for --ranks but received "zero"/);
    await expect(runCollectivesBench(['--op', 'allreduce'])).rejects.toThrow(/allreduce/);
  });
});
