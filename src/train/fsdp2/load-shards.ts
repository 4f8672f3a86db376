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
import { isMoeLayer, type ModelConfig } from '../../model/config.js';
import { fusedExpertNames, perExpertNames } from '../../model/params.js';
import { DeviceMesh } from '../../parallel/device-mesh.js';
import { chunkRange, Replicate, Shard } from '../../parallel/placement.js';
import type { HostShard } from '../../parallel/sharded-load.js';
import { loadHfShards, PER_EXPERT, type HfLoadOptions } from '../load-hf-shards.js';

/** This rank's Shard(0) pieces of every parameter of the checkpoint at `dir` (collective over `comm`). */
export async function loadFsdp2Shards(dir: string, cfg: ModelConfig, comm: Communicator, opts: HfLoadOptions = {}): Promise<Map<string, HostShard>> {
  const dp = comm.size;
  const E = cfg.moe?.numExperts ?? 0;
  const [e0, e1] = E ? chunkRange(E, dp, comm.rank) : [0, 0];
  const mesh = await DeviceMesh.create(comm, { shape: [dp], names: ['dp'] });
  let loaded;
  try {
    loaded = await loadHfShards(dir, cfg, mesh, {
      placements: (meta) => (PER_EXPERT.test(meta.name) ? [Replicate()] : [Shard(0, { allowEmpty: true })]),
      ownsExpert: (e) => e >= e0 && e < e1,
      load: opts,
    });
  } finally {
    mesh.destroy();
  }
  const { shards, perExpert } = loaded;
  if (perExpert) fuseLocalExperts(shards, cfg, e0, e1);
  return shards;
}

/** Replaces this rank's per-expert tensors (experts [e0, e1)) by its pieces of the fused ones. */
function fuseLocalExperts(shards: Map<string, HostShard>, cfg: ModelConfig, e0: number, e1: number): void {
  const { numExperts: E, intermediateSize: I } = cfg.moe!;
  const H = cfg.hiddenSize;
  const n = e1 - e0;
  const block = I * H;
  for (let layer = 0; layer < cfg.numLayers; layer++) {
    if (!isMoeLayer(cfg, layer)) continue;
    const gateUp = new Float32Array(n * 2 * block);
    const down = new Float32Array(n * block);
    for (let e = e0; e < e1; e++) {
      const names = perExpertNames(layer, e);
      const take = (name: string) => {
        const t = shards.get(name)!; // present: the manifest check passed on every rank
        shards.delete(name);
        return t.data;
      };
      gateUp.set(take(names.gate), 2 * (e - e0) * block);
      gateUp.set(take(names.up), (2 * (e - e0) + 1) * block);
      down.set(take(names.down), (e - e0) * block);
    }
    const f = fusedExpertNames(layer);
    const piece = (shape: number[], data: Float32Array): HostShard => ({
      shape,
      dtype: 'F32',
      placements: [Shard(0, { allowEmpty: true })],
      box: { offset: [e0, 0, 0], shape: [n, ...shape.slice(1)] },
      data,
    });
    shards.set(f.gateUp, piece([E, 2 * I, H], gateUp));
    shards.set(f.down, piece([E, H, I], down));
  }
}
