// A server sync's program (src/sync/server-program.ts): what every full sync after the first
// reuses. It must be the plan the sync used to derive per step: the same buckets, gathered
// rounds and packings as the pieces it is built from, each rank holding the packings it
// sends or receives, and the bytes of every HF tensor as the engine precision moves them.
import { describe, expect, it } from 'vitest';
import { loadModelConfig } from '../src/model/config.js';
import { describeSource, type RankSources } from '../src/parallel/weight-sources.js';
import { planLayout } from '../src/train/fsdp2/layout.js';
import { fsdp2SourceDescriptors } from '../src/train/fsdp2/weight-sources.js';
import { buildProgram } from '../src/sync/server-program.js';
import { packSmall } from '../src/sync/buckets.js';
import { wireBytes } from '../src/sync/wire.js';
import { DEFAULT_BUCKET_BYTES } from '../src/sync/report.js';
import { DEFAULT_COALESCE_BYTES } from '../src/sync/server.js';

const cfg = loadModelConfig(new URL('../examples/models/tiny-dense/config.json', import.meta.url).pathname);

function ranksOf(dp: number): RankSources[] {
  const plan = planLayout(cfg, dp);
  return Array.from({ length: dp }, (_, r) => ({ layout: 'fsdp2', sources: fsdp2SourceDescriptors(plan, r).map(describeSource) }));
}

const base = { cfg, bucketBytes: DEFAULT_BUCKET_BYTES, coalesceBytes: DEFAULT_COALESCE_BYTES, gather: true };

describe('buildProgram (the plan every full server sync reuses)', () => {
  it('plans every trainer rank, packs only what this rank sends or receives, and counts the wire bytes', () => {
    const ranks = ranksOf(4);
    const engine = buildProgram({ ...base, ranks, engineDtype: 'float32', trainerRank: null });
    const trainer = buildProgram({ ...base, ranks, engineDtype: 'float32', trainerRank: 2 });
    expect(engine.plans.length).toBe(4);
    expect(engine.rounds).toBe(Math.max(...engine.plans.map((p) => p.length)));
    // Every segment of a rank's plan is one of its owned pieces, each piece planned once.
    for (const [r, plan] of engine.plans.entries()) {
      const planned = plan.flatMap((b) => b.segments).reduce((a, s) => a + s.bytes, 0);
      const owned = ranks[r]!.sources.filter((s) => s.owner).reduce((a, s) => a + s.localNumel * 4, 0);
      expect(planned).toBe(owned);
    }
    // The tiny model's buckets are all small: every round is one gathered allToAllV.
    expect(engine.gathers.every((g) => g !== null)).toBe(true);
    // An engine rank unpacks every trainer rank's buckets; a trainer rank packs only its own.
    expect(engine.packs.map((p) => p.length)).toEqual(engine.plans.map((p) => p.length));
    expect(trainer.packs.map((p) => p.length)).toEqual(engine.plans.map((p, r) => (r === 2 ? p.length : 0)));
    expect(trainer.packs[2]).toEqual(engine.packs[2]);
    expect(engine.bytes).toBe(wireBytes(cfg, 'float32'));
    expect(engine.assemblies.size).toBe(ranks[0]!.sources.length);
    // wireOf reads a segment's source key (the name before '#part').
    const seg = engine.plans[0]![0]!.segments[0]!;
    expect(engine.wireOf(seg)).toBe('fp32');
  });

  it('without gathered rounds (across processes) every round is broadcasts, packed per bucket', () => {
    const ranks = ranksOf(2);
    const p = buildProgram({ ...base, ranks, engineDtype: 'float32', trainerRank: null, gather: false });
    expect(p.gathers.every((g) => g === null)).toBe(true);
    p.plans.forEach((plan, r) => plan.forEach((bucket, b) => expect(p.packs[r]![b]).toEqual(packSmall(bucket, base.coalesceBytes))));
  });

  it('a bf16 engine moves its matmul weights as bf16: fewer bytes, and their segments travel as bf16', () => {
    const ranks = ranksOf(2);
    const f32 = buildProgram({ ...base, ranks, engineDtype: 'float32', trainerRank: null });
    const bf16 = buildProgram({ ...base, ranks, engineDtype: 'bfloat16', trainerRank: null });
    expect(bf16.bytes).toBe(wireBytes(cfg, 'bfloat16'));
    expect(bf16.bytes).toBeLessThan(f32.bytes);
    const wires = new Set(bf16.plans.flat().flatMap((b) => b.segments.map((s) => bf16.wireOf(s))));
    expect(wires).toEqual(new Set(['fp32', 'bf16']));
    const planned = (p: typeof f32) =>
      p.plans
        .flat()
        .flatMap((b) => b.segments)
        .reduce((a, s) => a + s.bytes, 0);
    expect(planned(bf16)).toBeLessThan(planned(f32));
  });
});
