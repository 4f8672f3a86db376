/**
 * Megatron's initial weights straight from a Hugging Face checkpoint through the sharded
 * loader, on the mesh [edp, ep, tp] (dp = edp · ep; rank = (edp · ep + e) · tp + t, the
 * order MegatronStrategy uses). In the placements vocabulary, per HF tensor (read off the
 * split of the Megatron tensor it goes into, specs.ts):
 *
 * - q_proj / k_proj / v_proj, gate_proj / up_proj (dense MLP, shared expert): Shard(0) over tp
 *   (whole KV groups: tp divides the KV heads, so a rank's q, k and v rows are the groups of
 *   its linear_qkv; a gated q_proj's rows are per head, so its gates come along);
 * - o_proj, down_proj (dense MLP, shared expert): Shard(1) over tp (row parallel);
 * - fused experts gate_up_proj [E, 2I, H] / down_proj [E, H, I]: Shard(0) over ep;
 *   per-expert tensors are read whole and a rank keeps only its experts;
 * - embeddings, output layer, norms, the router, the shared expert gate and every Gated DeltaNet
 *   tensor: Replicate (not vocab-parallel here; GDN has no TP split).
 *
 * Each rank then builds its Megatron pieces on the host (q, k, v interleaved by query group;
 * gate rows then up rows; experts stacked), equal to tpSlice() of the full Megatron tensors.
 * The whole manifest is checked against the config on every rank before any data moves.
 */
import type { Communicator } from '../../runtime/comm/comm.js';
import type { ModelConfig } from '../../model/config.js';
import type { HostParam } from '../../model/param-store.js';
import { DeviceMesh } from '../../parallel/device-mesh.js';
import { Replicate, Shard, type Placement } from '../../parallel/placement.js';
import type { HostShard } from '../../parallel/sharded-load.js';
import { loadHfShardGroups, type HfLoadOptions } from '../load-hf-shards.js';
import { concat, interleaveQkv, megatronSpecs, tpLocalShape } from './bridge.js';
import { hfNamesOf } from './specs.js';
import type { ParallelSizes } from './layout.js';
import { MegatronLocalParams } from './local-params.js';
import { expertUnitName } from './weight-sources.js';

/** Each HF tensor's placement on the mesh [edp, ep, tp], from the split of the Megatron tensor it goes into. */
function placementsOf(cfg: ModelConfig): (name: string) => Placement[] {
  const R = Replicate();
  const byHf = new Map<string, Placement[]>();
  for (const spec of megatronSpecs(cfg)) {
    const p: Placement[] =
      spec.hf.kind === 'expert' ? [R, Shard(0), R] : spec.tp === 'row' ? [R, R, Shard(1)] : spec.tp === 'replicated' ? [R, R, R] : [R, R, Shard(0)];
    for (const n of hfNamesOf(spec.hf)) byHf.set(n, p);
  }
  return (name) => byHf.get(name) ?? [R, R, R];
}

/** This rank's Megatron pieces of the checkpoint at `dir` (collective over `comm`). */
export async function loadMegatronShards(
  dir: string,
  cfg: ModelConfig,
  comm: Communicator,
  sizes: ParallelSizes,
  opts: HfLoadOptions = {},
): Promise<MegatronLocalParams> {
  const [hf] = await loadMegatronHfGroups(dir, cfg, comm, sizes, { groups: [''] }, opts);
  return megatronLocalFromHf(cfg, hf!, sizes);
}

/**
 * This rank's HF-named pieces (the placements above) of each prefixed group of the folder at
 * `dir` (loadHfShardGroups; e.g. a training checkpoint's AdamW moments), placed as the
 * parameters they name; megatronLocalFromHf() lays them out. Collective over `comm`.
 */
export async function loadMegatronHfGroups(
  dir: string,
  cfg: ModelConfig,
  comm: Communicator,
  sizes: ParallelSizes,
  g: { groups: readonly string[]; optional?: boolean; whole?: ReadonlyMap<string, readonly number[]> },
  opts: HfLoadOptions = {},
): Promise<Array<Map<string, HostShard>>> {
  const { tp, dp, ep } = sizes;
  const El = (cfg.moe?.numExperts ?? 0) / ep;
  const mesh = await DeviceMesh.create(comm, { shape: [dp / ep, ep, tp], names: ['edp', 'ep', 'tp'] });
  const e = mesh.coordinate[1]!;
  const placed = placementsOf(cfg);
  try {
    return await loadHfShardGroups(dir, cfg, mesh, { placements: (meta) => placed(meta.name), experts: [e * El, El], load: opts, ...g });
  } finally {
    mesh.destroy();
  }
}

/** This rank's Megatron tensors from its HF-named pieces as loadMegatronHfGroups() keeps them. */
export function megatronLocalFromHf(cfg: ModelConfig, hf: ReadonlyMap<string, HostShard>, sizes: ParallelSizes): MegatronLocalParams {
  return new MegatronLocalParams(toMegatron(cfg, hf, sizes.tp, (cfg.moe?.numExperts ?? 0) / sizes.ep));
}

/** Megatron-named local tensors from HF-named local pieces (experts fused: the rank's El experts stacked). */
function toMegatron(cfg: ModelConfig, hf: ReadonlyMap<string, HostShard>, tp: number, El: number): Map<string, HostParam> {
  const local = (name: string) => hf.get(name)!.data; // present: the manifest check passed on every rank
  // A rank's q / k / v rows are whole KV groups, so they interleave as a model with its share of the heads.
  const localCfg = { ...cfg, numHeads: cfg.numHeads / tp, numKvHeads: cfg.numKvHeads / tp };
  const out = new Map<string, HostParam>();
  for (const spec of megatronSpecs(cfg)) {
    const src = spec.hf;
    if (src.kind === 'expert') {
      if (spec.expert !== 0) continue;
      // The stacked local experts are the rank's piece of the fused tensor, byte for byte.
      const fc = spec.name.endsWith('linear_fc1.weight') ? 'fc1' : 'fc2';
      out.set(expertUnitName(spec.layer!, fc), { shape: [El, ...spec.shape], data: local(src.hf) });
      continue;
    }
    const data =
      src.kind === 'copy'
        ? local(src.hf)
        : src.kind === 'qkv'
          ? interleaveQkv(localCfg, local(src.q), local(src.k), local(src.v))
          : concat(local(src.gate), local(src.up));
    out.set(spec.name, { shape: tpLocalShape(spec, tp), data });
  }
  return out;
}
