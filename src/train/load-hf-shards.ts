/**
 * The part of loading a Hugging Face checkpoint through the sharded loader that every
 * strategy shares: the whole manifest is checked against the config on every rank before
 * any data moves (one CheckpointFormatError naming the tensors and the folder), a tied
 * model's extra lm_head.weight is skipped, and per-expert tensors (read whole) are kept
 * only by the ranks that own their expert. The strategy gives the placements and which
 * experts it owns; it lays out the pieces itself.
 */
import { CheckpointFormatError } from '../runtime/errors.js';
import type { ModelConfig } from '../model/config.js';
import { checkParamsAgainstConfig } from '../model/params.js';
import type { DeviceMesh } from '../parallel/device-mesh.js';
import type { Placement } from '../parallel/placement.js';
import { loadShardedHost, type HostShard, type LoadMode, type ParamMeta } from '../parallel/sharded-load.js';

export interface HfLoadOptions {
  /** Default 'rank0-broadcast'. */
  mode?: LoadMode;
  /** Largest broadcast in 'rank0-broadcast' mode (bytes). */
  bucketBytes?: number;
}

/** `model.layers.{l}.mlp.experts.{e}.{gate,up,down}_proj.weight` of a per-expert checkpoint. */
export const PER_EXPERT = /^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$/;

/** This rank's pieces of the checkpoint at `dir` on `mesh` (collective over mesh.parent), and whether it stores experts one by one. */
export async function loadHfShards(
  dir: string,
  cfg: ModelConfig,
  mesh: DeviceMesh,
  o: { placements: (meta: ParamMeta) => Placement[]; ownsExpert: (expert: number) => boolean; load?: HfLoadOptions },
): Promise<{ shards: Map<string, HostShard>; perExpert: boolean }> {
  let perExpert = false;
  const shards = await loadShardedHost(dir, {
    mesh,
    ...(o.load?.mode ? { mode: o.load.mode } : {}),
    ...(o.load?.bucketBytes ? { bucketBytes: o.load.bucketBytes } : {}),
    check: (manifest) => {
      try {
        perExpert = checkParamsAgainstConfig(manifest, cfg) === 'per-expert';
      } catch (e) {
        if (e instanceof CheckpointFormatError) throw new CheckpointFormatError(`${dir}: ${e.message}`, { ...e.details, file: dir });
        throw e;
      }
    },
    placements: o.placements,
    select: (meta) => {
      // A tied model's exporter may write lm_head.weight too; the embedding is the weight.
      if (cfg.tieWordEmbeddings && meta.name === 'lm_head.weight') return false;
      const m = PER_EXPERT.exec(meta.name);
      return !m || o.ownsExpert(Number(m[2]));
    },
  });
  return { shards, perExpert };
}
