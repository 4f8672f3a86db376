/**
 * FSDP2's initial weights straight from a Hugging Face checkpoint through the sharded
 * loader: every parameter is Shard(0) over the data-parallel ranks (torch.chunk rows, the
 * rows a flat unit keeps), so a rank's host holds its own rows and the device its own
 * shard; rank 0 reads the files and broadcasts them in buckets (device peak: the local
 * shard plus one bucket), or every rank reads them itself.
 *
 * Experts: a fused checkpoint (`mlp.experts.gate_up_proj` [E, 2I, H], `down_proj` [E, H, I])
 * is sharded like any tensor. A per-expert checkpoint (`mlp.experts.{e}.*`) is read whole
 * per tensor but a rank keeps only the experts of its rows of the fused tensors and builds
 * its piece of them (gate then up per expert, as convertExpertLayout does).
 *
 * The whole manifest is checked against the config on every rank before any data moves,
 * so a missing, unexpected or misshapen tensor stops every rank with one error naming the
 * tensors and the checkpoint.
 */
import type { Communicator } from '../../runtime/comm/comm.js';
import type { ModelConfig } from '../../model/config.js';
import { DeviceMesh } from '../../parallel/device-mesh.js';
import { chunkRange, Shard } from '../../parallel/placement.js';
import type { HostShard } from '../../parallel/sharded-load.js';
import { loadHfShardGroups, type HfLoadOptions } from '../load-hf-shards.js';

/** This rank's Shard(0) pieces of every parameter of the checkpoint at `dir` (collective over `comm`). */
export async function loadFsdp2Shards(dir: string, cfg: ModelConfig, comm: Communicator, opts: HfLoadOptions = {}): Promise<Map<string, HostShard>> {
  return (await loadFsdp2Groups(dir, cfg, comm, { groups: [''] }, opts))[0]!;
}

/**
 * This rank's Shard(0) pieces of each prefixed group of the folder at `dir` (loadHfShardGroups;
 * e.g. a training checkpoint's AdamW moments), placed as the parameters they name (collective).
 */
export async function loadFsdp2Groups(
  dir: string,
  cfg: ModelConfig,
  comm: Communicator,
  g: { groups: readonly string[]; optional?: boolean; whole?: ReadonlyMap<string, readonly number[]> },
  opts: HfLoadOptions = {},
): Promise<Array<Map<string, HostShard>>> {
  const dp = comm.size;
  const E = cfg.moe?.numExperts ?? 0;
  const [e0, e1] = E ? chunkRange(E, dp, comm.rank) : [0, 0];
  const mesh = await DeviceMesh.create(comm, { shape: [dp], names: ['dp'] });
  try {
    return await loadHfShardGroups(dir, cfg, mesh, { placements: () => [Shard(0, { allowEmpty: true })], experts: [e0, e1 - e0], load: opts, ...g });
  } finally {
    mesh.destroy();
  }
}
