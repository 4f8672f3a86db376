/**
 * DeviceMesh under launch (8 real worker ranks, ctx.comm): row-major coordinates like
 * torch's init_device_mesh, one communicator per named dim checked with real
 * all-reduces, a 3-d mesh, and the argument errors.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';

beforeAll(() => ensureParallelBuilt(), 120_000);

describe('DeviceMesh', () => {
  it('[2, 4] dp x tp and [2, 2, 2] on 8 ranks: coordinates, per-dim communicators, errors', async () => {
    const r = await launchFixture(8, 'test/fixtures/parallel/mesh-cases.mjs', []);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.results.map((x) => x.rank)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    for (const x of r.results) {
      const rank = x.rank;
      const [d, t] = [Math.floor(rank / 4), rank % 4];
      expect(x.coordinate).toEqual([d, t]);
      expect(x.sizes).toEqual({ dp: 2, tp: 4, all: 8 });
      // A dim's communicator is ordered by the coordinate along that dim.
      expect(x.commRanks).toEqual({ dp: [d, 2], tp: [t, 4] });
      // tp groups are the rows {4d .. 4d+3}; dp groups the columns {t, t + 4}.
      expect(x.tp).toEqual([4 * d + (4 * d + 1) + (4 * d + 2) + (4 * d + 3), 4]);
      expect(x.dp).toEqual([t + (t + 4), 2]);
      const [p, q, s] = [Math.floor(rank / 4), Math.floor(rank / 2) % 2, rank % 2];
      const cube = x.cube as { coordinate: number[]; sums: Record<string, number[]>; rankAt: number };
      expect(cube.coordinate).toEqual([p, q, s]);
      expect(cube.rankAt).toBe(rank);
      expect(cube.sums).toEqual({ pp: [2 * (rank % 4) + 4, 2], dp: [2 * (rank - 2 * q) + 2, 2], tp: [2 * (rank - s) + 1, 2] });
      expect(x.str).toBe(`DeviceMesh(dp=2, tp=4; rank ${rank} at [${d}, ${t}])`);
      const errors = x.errors as Record<string, { name: string; message: string }>;
      expect(errors.product.name).toBe('InvalidArgumentError');
      expect(errors.product.message).toContain('mesh shape [3, 2] holds 6 ranks but the communicator has 8');
      expect(errors.duplicate.message).toContain("dim name 'dp' is given twice in ['dp', 'dp']");
      expect(errors.names.message).toContain('expected 2 dim names (one per entry of shape [2, 4])');
      expect(errors.unknown.message).toBe("Unknown mesh dim 'ep'; this mesh has dims ['dp', 'tp'] (or indices 0..1).");
      expect(errors.unknownSize.message).toContain("Unknown mesh dim 'pp'");
    }
  });
});
