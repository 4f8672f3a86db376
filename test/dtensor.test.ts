/**
 * DTensor: every redistribute path (S->R, R->S, P->R, P->S, S(i)->S(j), R->P, S->P,
 * P(max)->*) on 2 and 4 ranks and a 2x2 mesh, on tensors with odd sizes, sizes below
 * the mesh size (empty trailing shards) and an empty dim, in fp32, int32 and bf16,
 * compared exactly with host slices of the full tensor (test/fixtures/parallel/
 * dtensor-cases.mjs, real worker ranks under launch). Plus the torch.chunk rule and
 * the no-implicit-communication errors in this process on one rank.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture, type LaunchRun } from './helpers/parallel-launch.js';
import { Communicator } from '../src/runtime/comm/comm.js';
import { Device } from '../src/runtime/device/device.js';
import { Tensor } from '../src/runtime/device/tensor.js';
import { DTensor, DeviceMesh, Partial, Replicate, Shard, chunkRange, localBox } from '../src/parallel/index.js';

beforeAll(() => ensureParallelBuilt(), 120_000);

describe('placements follow torch.chunk', () => {
  it('ceil-sized chunks; trailing chunks smaller or empty', () => {
    const chunks = (size: number, parts: number) => Array.from({ length: parts }, (_, i) => chunkRange(size, parts, i));
    expect(chunks(5, 4)).toEqual([
      [0, 2],
      [2, 4],
      [4, 5],
      [5, 5],
    ]);
    expect(chunks(3, 4)).toEqual([
      [0, 1],
      [1, 2],
      [2, 3],
      [3, 3],
    ]);
    expect(chunks(4, 3)).toEqual([
      [0, 2],
      [2, 4],
      [4, 4],
    ]);
    expect(chunks(8, 4)).toEqual([
      [0, 2],
      [2, 4],
      [4, 6],
      [6, 8],
    ]);
    expect(chunks(0, 2)).toEqual([
      [0, 0],
      [0, 0],
    ]);
    expect(() => chunkRange(4, 2, 2)).toThrow(/index in \[0, parts\)/);
  });

  it('nested shards of one tensor dim apply in mesh-dim order', () => {
    // [Shard(0), Shard(0)] on 2x2, 7 rows: dp chunks [0,4) [4,7); tp chunks of those.
    expect(localBox([7, 3], [Shard(0), Shard(0)], [2, 2], [0, 1])).toEqual({ offset: [2, 0], shape: [2, 3] });
    expect(localBox([7, 3], [Shard(0), Shard(0)], [2, 2], [1, 1])).toEqual({ offset: [6, 0], shape: [1, 3] });
    expect(localBox([7, 3], [Shard(1), Replicate()], [2, 2], [1, 0])).toEqual({ offset: [0, 2], shape: [7, 1] });
  });
});

describe('redistribute on real ranks', () => {
  // The meshes of the same ranks share one launch (started by the first test that needs it), which
  // checks them one after the other; each test reads its own mesh's results, one from every rank.
  const launches = new Map<number, Promise<LaunchRun>>();
  const MESHES = [
    [2, '2', 90],
    [4, '4', 90],
    [4, '2x2', 1466],
  ] as const;
  const launchOf = (nproc: number) => {
    let run = launches.get(nproc);
    if (!run) {
      const meshes = MESHES.filter(([n]) => n === nproc).map(([, m]) => m);
      run = launchFixture(nproc, 'test/fixtures/parallel/dtensor-cases.mjs', [meshes.join(',')], {}, 110_000);
      launches.set(nproc, run);
    }
    return run;
  };
  for (const [nproc, mesh, cases] of MESHES) {
    it(`mesh ${mesh}: every path, exact`, async () => {
      const r = await launchOf(nproc);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      const results = r.results.filter((x) => x.mesh === mesh);
      expect(results.map((x) => x.rank)).toEqual(Array.from({ length: nproc }, (_, i) => i));
      for (const x of results) {
        expect(x.wrong, `rank ${x.rank}`).toEqual([]);
        expect(x.cases).toBe(cases);
        expect(x.fullOk).toBe(true);
        // Only the three tensors the fixture still holds: no intermediate leaked.
        expect(x.live).toBe(3);
      }
    }, 120_000);
  }
});

describe('no implicit communication (one rank, this process)', () => {
  let comm: Communicator;
  let mesh: DeviceMesh;
  const device = Device.get(0);
  beforeAll(async () => {
    comm = await Communicator.initRank({ uniqueId: Communicator.uniqueId(), nranks: 1, rank: 0, device });
    mesh = await DeviceMesh.create(comm, { shape: [1], names: ['dp'] });
  });
  afterAll(() => {
    mesh?.destroy();
    comm?.destroy();
  });
  const make = (placements: Parameters<typeof DTensor.fromLocal>[2]) =>
    DTensor.fromLocal(Tensor.fromArray(device, [1, 2, 3, 4], [2, 2]), mesh, placements, { shape: [2, 2] });

  it('add / mul / copyFrom of different placements name the redistribute to call', () => {
    const a = make([Shard(0)]);
    const b = make([Replicate()]);
    expect(() => a.add(b)).toThrow('dtensor add: a is [Shard(0)] but b is [Replicate()]; call b.redistribute([Shard(0)]) first');
    expect(() => b.mul(a)).toThrow('dtensor mul: a is [Replicate()] but b is [Shard(0)]; call b.redistribute([Replicate()]) first');
    expect(() => a.copyFrom(b)).toThrow('dtensor copy: dst is [Shard(0)] but src is [Replicate()]; call src.redistribute([Shard(0)]) first');
    const p = make([Partial('sum')]);
    const q = make([Partial('sum')]);
    expect(() => p.mul(q)).toThrow(
      "dtensor mul: both operands are [Partial('sum')] and mul of Partial('sum') values is not Partial('sum'); call a.redistribute([Replicate()]) and b.redistribute([Replicate()]) first.",
    );
    expect(() => make([Partial('max')]).add(make([Partial('max')]))).toThrow(/add of Partial\('max'\) values/);
    for (const t of [a, b, p, q]) t.release();
  });

  it('same placements combine locally', async () => {
    const a = make([Shard(1)]);
    const b = make([Shard(1)]);
    const c = a.add(b);
    expect(Array.from(await c.toLocal().toArray())).toEqual([2, 4, 6, 8]);
    expect(c.placements).toEqual([Shard(1)]);
    a.copyFrom(c);
    expect(Array.from(await a.toLocal().toArray())).toEqual([2, 4, 6, 8]);
    for (const t of [a, b, c]) t.release();
  });

  it('fromLocal checks the local shape and needs the global shape for shards', () => {
    const t = Tensor.fromArray(device, [1, 2, 3], [3]);
    expect(() => DTensor.fromLocal(t, mesh, [Shard(0)])).toThrow(/cannot be known without communication .*HINT: pass \{ shape: \[\.\.\.\] \}/);
    expect(() => DTensor.fromLocal(t, mesh, [Shard(0)], { shape: [4] })).toThrow(
      'DTensor.fromLocal(): a tensor of global shape [4] placed [Shard(0)] on mesh [1] has local shape [4] at coordinate [0], but local is [3].',
    );
    expect(() => DTensor.fromLocal(t, mesh, [Shard(1)], { shape: [3] })).toThrow(/Shard\(1\) is out of range for a 1-d tensor/);
    expect(() => DTensor.fromLocal(t, mesh, [Shard(0), Replicate()], { shape: [3] })).toThrow(/expected 1 placement \(one per mesh dim\) but received 2/);
    t.release();
  });
});
