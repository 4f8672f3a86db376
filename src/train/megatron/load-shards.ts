/**
 * Megatron's initial weights straight from a Hugging Face checkpoint through the sharded
 * loader, on the mesh [edp, ep, tp] (dp = edp · ep; rank = (edp · ep + e) · tp + t, the
 * order MegatronStrategy uses). In the placements vocabulary, per HF tensor:
 *
 * - q_proj / k_proj / v_proj, dense gate_proj / up_proj: Shard(0) over tp (whole KV groups:
 *   tp divides the KV heads, so a rank's q, k and v rows are the groups of its linear_qkv);
 * - o_proj, dense down_proj: Shard(1) over tp (row parallel);
 * - fused experts gate_up_proj [E, 2I, H] / down_proj [E, H, I]: Shard(0) over ep;
 *   per-expert tensors are read whole and a rank keeps only its experts;
 * - embeddings, output layer, norms and the router: Replicate (not vocab-parallel here).
 *
 * Each rank then builds its Megatron pieces on the host (q, k, v interleaved by query group;
 * gate rows then up rows; experts stacked), equal to tpSlice() of the full Megatron tensors.
 * The whole manifest is checked against the config on every rank before any data moves.
 */
import type { Communicator } from '../../runtime/comm/comm.js';
import { InternalError } from '../../runtime/errors.js';
import type { ModelConfig } from '../../model/config.js';
import type { HostParam } from '../../model/param-store.js';
import { fusedExpertNames } from '../../model/params.js';
import { DeviceMesh } from '../../parallel/device-mesh.js';
import { Replicate, Shard, type Placement } from '../../parallel/placement.js';
import type { HostShard } from '../../parallel/sharded-load.js';
import { loadHfShardGroups, type HfLoadOptions } from '../load-hf-shards.js';
import { concat, interleaveQkv, megatronSpecs } from './bridge.js';
import type { ParallelSizes } from './layout.js';
import { MegatronLocalParams } from './local-params.js';
import { refuseQwen35OnMegatron } from './qwen35-limits.js';
import { expertUnitName } from './weight-sources.js';

function placementsOf(name: string): Placement[] {
  const R = Replicate();
  if (/\.self_attn\.[qkv]_proj\.weight$/.test(name) || /\.mlp\.(gate|up)_proj\.weight$/.test(name)) return [R, R, Shard(0)];
  if (/\.self_attn\.o_proj\.weight$/.test(name) || /\.mlp\.down_proj\.weight$/.test(name)) return [R, R, Shard(1)];
  if (/\.mlp\.experts\.(gate_up_proj|down_proj)$/.test(name)) return [R, Shard(0), R];
  return [R, R, R];
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
  refuseQwen35OnMegatron(cfg, sizes.tp, 'loadMegatronShards()'); // before the mesh and any file read
  const { tp, dp, ep } = sizes;
  const El = (cfg.moe?.numExperts ?? 0) / ep;
  const mesh = await DeviceMesh.create(comm, { shape: [dp / ep, ep, tp], names: ['edp', 'ep', 'tp'] });
  const e = mesh.coordinate[1]!;
  try {
    return await loadHfShardGroups(dir, cfg, mesh, { placements: (meta) => placementsOf(meta.name), experts: [e * El, El], load: opts, ...g });
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
  const localCfg = { ...cfg, numHeads: cfg.numHeads / tp, numKvHeads: cfg.numKvHeads / tp };
  const out = new Map<string, HostParam>();
  const put = (name: string, shape: number[], data: Float32Array) => out.set(name, { shape, data });
  for (const spec of megatronSpecs(cfg)) {
    const { name, layer: i } = spec;
    const p = `model.layers.${i}`;
    if (spec.expert !== undefined) {
      if (spec.expert !== 0) continue;
      const { intermediateSize: I } = cfg.moe!;
      const H = cfg.hiddenSize;
      const f = fusedExpertNames(i!);
      // The stacked local experts are the rank's piece of the fused tensors, byte for byte.
      put(expertUnitName(i!, 'fc1'), [El, 2 * I, H], local(f.gateUp));
      put(expertUnitName(i!, 'fc2'), [El, H, I], local(f.down));
      continue;
    }
    const shape =
      spec.tp === 'column' || spec.tp === 'gate-up'
        ? [spec.shape[0]! / tp, spec.shape[1]!]
        : spec.tp === 'row'
          ? [spec.shape[0]!, spec.shape[1]! / tp]
          : [...spec.shape];
    let data: Float32Array;
    if (name === 'embedding.word_embeddings.weight') data = local('model.embed_tokens.weight');
    else if (name === 'output_layer.weight') data = local('lm_head.weight');
    else if (name === 'decoder.final_layernorm.weight') data = local('model.norm.weight');
    else if (name.endsWith('linear_qkv.layer_norm_weight')) data = local(`${p}.input_layernorm.weight`);
    else if (name.endsWith('linear_qkv.weight'))
      data = interleaveQkv(localCfg, local(`${p}.self_attn.q_proj.weight`), local(`${p}.self_attn.k_proj.weight`), local(`${p}.self_attn.v_proj.weight`));
    else if (name.endsWith('q_layernorm.weight')) data = local(`${p}.self_attn.q_norm.weight`);
    else if (name.endsWith('k_layernorm.weight')) data = local(`${p}.self_attn.k_norm.weight`);
    else if (name.endsWith('linear_proj.weight')) data = local(`${p}.self_attn.o_proj.weight`);
    else if (name.endsWith('pre_mlp_layernorm.weight') || name.endsWith('linear_fc1.layer_norm_weight')) data = local(`${p}.post_attention_layernorm.weight`);
    else if (name.endsWith('mlp.router.weight')) data = local(`${p}.mlp.gate.weight`);
    else if (name.endsWith('mlp.linear_fc1.weight')) data = concat(local(`${p}.mlp.gate_proj.weight`), local(`${p}.mlp.up_proj.weight`));
    else if (name.endsWith('mlp.linear_fc2.weight')) data = local(`${p}.mlp.down_proj.weight`);
    else throw new InternalError(`loadMegatronShards(): no HF source for ${name}`);
    put(name, shape, data);
  }
  return out;
}
