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
import { CheckpointFormatError } from '../../runtime/errors.js';
import { isMoeLayer, type ModelConfig } from '../../model/config.js';
import { checkParamsAgainstConfig, fusedExpertNames, perExpertNames } from '../../model/params.js';
import { DeviceMesh } from '../../parallel/device-mesh.js';
import { chunkRange, Replicate, Shard } from '../../parallel/placement.js';
import { loadShardedHost, type HostShard, type LoadMode, type ParamMeta } from '../../parallel/sharded-load.js';

export interface Fsdp2LoadOptions {
  /** Default 'rank0-broadcast'. */
  mode?: LoadMode;
  /** Largest broadcast in 'rank0-broadcast' mode (bytes). */
  bucketBytes?: number;
}

const PER_EXPERT = /^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$/;

/** This rank's Shard(0) pieces of every parameter of the checkpoint at `dir` (collective over `comm`). */
export async function loadFsdp2Shards(dir: string, cfg: ModelConfig, comm: Communicator, opts: Fsdp2LoadOptions = {}): Promise<Map<string, HostShard>> {
  const dp = comm.size;
  const E = cfg.moe?.numExperts ?? 0;
  const [e0, e1] = E ? chunkRange(E, dp, comm.rank) : [0, 0];
  const mesh = await DeviceMesh.create(comm, { shape: [dp], names: ['dp'] });
  let perExpert = false;
  let shards: Map<string, HostShard>;
  try {
    shards = await loadShardedHost(dir, {
      mesh,
      ...(opts.mode ? { mode: opts.mode } : {}),
      ...(opts.bucketBytes ? { bucketBytes: opts.bucketBytes } : {}),
      check: (manifest) => {
        try {
          perExpert = checkParamsAgainstConfig(manifest, cfg) === 'per-expert';
        } catch (e) {
          if (e instanceof CheckpointFormatError) throw new CheckpointFormatError(`${dir}: ${e.message}`, { ...e.details, file: dir });
          throw e;
        }
      },
      placements: (meta: ParamMeta) => (PER_EXPERT.test(meta.name) ? [Replicate()] : [Shard(0, { allowEmpty: true })]),
      select: (meta: ParamMeta) => {
        // A tied model's exporter may write lm_head.weight too; the embedding is the weight.
        if (cfg.tieWordEmbeddings && meta.name === 'lm_head.weight') return false;
        const m = PER_EXPERT.exec(meta.name);
        return !m || (Number(m[2]) >= e0 && Number(m[2]) < e1);
      },
    });
  } finally {
    mesh.destroy();
  }
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
      gateUp.set(take(names.gate), (2 * (e - e0)) * block);
      gateUp.set(take(names.up), (2 * (e - e0) + 1) * block);
      down.set(take(names.down), (e - e0) * block);
    }
    const f = fusedExpertNames(layer);
    const piece = (shape: number[], data: Float32Array): HostShard => ({
      shape, dtype: 'F32', placements: [Shard(0, { allowEmpty: true })], box: { offset: [e0, 0, 0], shape: [n, ...shape.slice(1)] }, data,
    });
    shards.set(f.gateUp, piece([E, 2 * I, H], gateUp));
    shards.set(f.down, piece([E, H, I], down));
  }
}
