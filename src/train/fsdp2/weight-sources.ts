/**
 * What an fsdp2 rank publishes to the weight sync (parallel/weight-sources.ts): every
 * model parameter (HF name, fused experts) Shard(0) over the dp ranks, its local view the
 * padded chunk inside the unit's flat shard; every rank owns its chunk. LoRA adapter units
 * are not model weights (an adapter sync sends them) and are left out. Pure: the strategy
 * attaches the communicator and its device shards.
 */
import { Shard } from '../../parallel/placement.js';
import type { SourceDescriptor } from '../../parallel/weight-sources.js';
import type { FlatLayout } from './layout.js';

/** The sources of dp rank `rank`, each with the unit and element offset of its chunk. */
export function fsdp2SourceDescriptors(plan: FlatLayout, rank: number): Array<SourceDescriptor & { unit: string; offset: number }> {
  return plan.units
    .filter((u) => !u.key.startsWith('lora.'))
    .flatMap((u) =>
      u.params.map((p) => ({
        key: p.name,
        shape: [...p.shape],
        placement: Shard(0),
        parts: plan.dp,
        part: rank,
        localNumel: p.chunk,
        map: { kind: 'identity' as const, hf: p.name },
        owner: true,
        unit: u.key,
        offset: p.offset,
      })),
    );
}
