/**
 * The part of loading a Hugging Face checkpoint through the sharded loader that every
 * strategy shares: the whole manifest is checked against the config on every rank before
 * any data moves (one CheckpointFormatError naming the tensors and the folder), a tied
 * model's extra lm_head.weight is skipped, and per-expert tensors (read whole) are kept
 * only by the ranks that own their expert and then stacked into the rank's piece of the
 * fused tensors (gate then up per expert, as convertExpertLayout does), so a strategy sees
 * fused experts whatever the checkpoint stores. A Qwen3.5 checkpoint of the multimodal model
 * (`model.language_model.*`, the vision tower `model.visual.*`, the MTP head `mtp.*`) gives the
 * text model under the names paramSpecs uses, as textOnlyWeights does for a whole load: the
 * skipped tensors are never kept, and rank 0 says how many it skipped. The strategy gives the
 * placements and the experts it owns; it lays out the pieces itself.
 */
import { CheckpointFormatError } from '../runtime/errors.js';
import { isMoeLayer, isQwen35, type ModelConfig } from '../model/config.js';
import { checkParamsAgainstConfig, fusedExpertNames, perExpertNames } from '../model/params.js';
import { textOnlyWeights } from '../model/params-qwen35.js';
import type { DeviceMesh } from '../parallel/device-mesh.js';
import { Replicate, type Placement } from '../parallel/placement.js';
import { loadShardedHost, type HostShard, type LoadMode, type ParamMeta } from '../parallel/sharded-load.js';

export interface HfLoadOptions {
  /** Default 'rank0-broadcast'. */
  mode?: LoadMode;
  /** Largest broadcast in 'rank0-broadcast' mode (bytes). */
  bucketBytes?: number;
}

/**
 * The text model's name of checkpoint tensor `name` (null: a Qwen3.5 vision / MTP tensor the text
 * model does not have); other models keep every name.
 */
function textNameOf(cfg: ModelConfig): (name: string) => string | null {
  if (!isQwen35(cfg)) return (name) => name;
  return (name) =>
    textOnlyWeights(new Map([[name, name]]), () => {})
      .keys()
      .next().value ?? null;
}

/** `model.layers.{l}.mlp.experts.{e}.{gate,up,down}_proj.weight` of a per-expert checkpoint. */
export const PER_EXPERT = /^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$/;

/**
 * This rank's pieces of the checkpoint at `dir` on `mesh` (collective over mesh.parent), experts
 * in the fused layout: the rank owns experts [experts[0], experts[0] + experts[1]) of every MoE layer.
 */
export async function loadHfShards(
  dir: string,
  cfg: ModelConfig,
  mesh: DeviceMesh,
  o: { placements: (meta: ParamMeta) => Placement[]; experts: readonly [first: number, count: number]; load?: HfLoadOptions },
): Promise<Map<string, HostShard>> {
  return (await loadHfShardGroups(dir, cfg, mesh, { ...o, groups: [''] }))[0]!;
}

/**
 * As loadHfShards, for a folder whose tensors are model parameters under name prefixes, one
 * group per prefix (a training checkpoint's optimizer folder: `exp_avg.<HF name>` and
 * `exp_avg_sq.<HF name>`): every tensor takes the placements of the parameter it names, so a
 * rank keeps the same pieces of each group as of the parameters, in one pass over the files.
 * Each group must match the config as a whole; with `optional` a folder holding no tensors at
 * all (a run saved before its first optimizer step) gives empty groups. `whole` names tensors
 * outside the model (LoRA adapters, by PEFT name, with their shapes): each rank keeps them whole
 * (they are small), their shapes are checked with the rest, and a group holding nothing else
 * (the moments of a LoRA run: the base is frozen) is not matched against the config. Returns
 * one map per prefix, keyed by the HF name without it.
 */
export async function loadHfShardGroups(
  dir: string,
  cfg: ModelConfig,
  mesh: DeviceMesh,
  o: {
    placements: (meta: ParamMeta) => Placement[];
    experts: readonly [first: number, count: number];
    load?: HfLoadOptions;
    groups: readonly string[];
    optional?: boolean;
    whole?: ReadonlyMap<string, readonly number[]>;
  },
): Promise<Array<Map<string, HostShard>>> {
  const whole = o.whole ?? new Map<string, readonly number[]>();
  const [first, count] = o.experts;
  // Longest prefix first: 'exp_avg_sq.' is not 'exp_avg.' + a name, but keep it unambiguous anyway.
  const prefixes = [...o.groups].sort((a, b) => b.length - a.length);
  const split = (name: string): [prefix: string, hf: string] | null => {
    const p = prefixes.find((x) => name.startsWith(x));
    return p === undefined ? null : [p, name.slice(p.length)];
  };
  const textName = textNameOf(cfg);
  const hfMeta = (meta: ParamMeta): ParamMeta => {
    const hf = split(meta.name)?.[1] ?? meta.name;
    return { ...meta, name: textName(hf) ?? hf };
  };
  const perExpert = new Set<string>();
  const shards = await loadShardedHost(dir, {
    mesh,
    ...(o.load?.mode ? { mode: o.load.mode } : {}),
    ...(o.load?.bucketBytes ? { bucketBytes: o.load.bucketBytes } : {}),
    check: (manifest) => {
      const stray = manifest.filter((m) => split(m.name) === null).map((m) => m.name);
      if (stray.length)
        throw new CheckpointFormatError(
          `${dir}: unexpected tensor${stray.length === 1 ? '' : 's'} ${stray.slice(0, 5).join(', ')}; expected ${o.groups.map((g) => `${g}*`).join(' and ')}. HINT: this folder was not written by saveCheckpoint; load another step.`,
          { file: dir, unexpected: stray },
        );
      for (const m of manifest) {
        const want = whole.get(hfMeta(m).name);
        if (want && (want.length !== m.shape.length || want.some((d, k) => d !== m.shape[k])))
          throw new CheckpointFormatError(
            `${dir}: ${JSON.stringify(m.name)}${m.file ? ` (in ${m.file})` : ''} has shape [${m.shape.join(', ')}], expected [${want.join(', ')}]. HINT: the folder was saved with another LoRA config; resume with the run's own config.`,
            { file: dir, tensor: m.name },
          );
      }
      // One line (rank 0) when a Qwen3.5 load drops the vision tower / MTP head, so none goes silently.
      if (isQwen35(cfg)) textOnlyWeights(new Map(manifest.map((m) => [m.name, m])), mesh.parent.rank === 0 ? undefined : () => {}, cfg.modelType);
      if (o.optional && manifest.length === 0) return;
      for (const g of o.groups) {
        try {
          const mine = manifest.filter((m) => split(m.name)?.[0] === g).map(hfMeta);
          const model = mine.filter((m) => !whole.has(m.name));
          if (model.length === 0 && mine.length > 0) continue;
          if (checkParamsAgainstConfig(model, cfg) === 'per-expert') perExpert.add(g);
        } catch (e) {
          if (e instanceof CheckpointFormatError) {
            const what = g === '' ? '' : `the ${g}* tensors (names below without the prefix): `;
            throw new CheckpointFormatError(`${dir}: ${what}${e.message}`, { ...e.details, file: dir, ...(g ? { prefix: g } : {}) });
          }
          throw e;
        }
      }
    },
    placements: (meta) => {
      const m = hfMeta(meta);
      const skipped = textName(split(meta.name)?.[1] ?? meta.name) === null; // never kept (select)
      return skipped || PER_EXPERT.test(m.name) || whole.has(m.name) ? mesh.shape.map(() => Replicate()) : o.placements(m);
    },
    select: (meta) => {
      if (textName(split(meta.name)?.[1] ?? meta.name) === null) return false;
      const name = hfMeta(meta).name;
      // A tied model's exporter may write lm_head.weight too; the embedding is the weight.
      if (cfg.tieWordEmbeddings && name === 'lm_head.weight') return false;
      const m = PER_EXPERT.exec(name);
      return !m || (Number(m[2]) >= first && Number(m[2]) < first + count);
    },
  });
  const out = o.groups.map(() => new Map<string, HostShard>());
  for (const [name, shard] of shards) {
    const [p, hf] = split(name)!; // every name has a prefix: the check passed on every rank
    out[o.groups.indexOf(p)]!.set(textName(hf)!, shard);
  }
  o.groups.forEach((g, i) => perExpert.has(g) && fuseLocalExperts(out[i]!, cfg, o.placements, first, count));
  return out;
}

/** Replaces this rank's per-expert tensors (experts [first, first + count)) by its pieces of the fused ones. */
function fuseLocalExperts(shards: Map<string, HostShard>, cfg: ModelConfig, placements: (meta: ParamMeta) => Placement[], first: number, count: number): void {
  const { numExperts: E, intermediateSize: I } = cfg.moe!;
  const H = cfg.hiddenSize;
  const block = I * H;
  const take = (name: string) => {
    const t = shards.get(name)!; // present: the manifest check passed on every rank
    shards.delete(name);
    return t.data;
  };
  for (let layer = 0; layer < cfg.numLayers; layer++) {
    if (!isMoeLayer(cfg, layer)) continue;
    const gateUp = new Float32Array(count * 2 * block);
    const down = new Float32Array(count * block);
    for (let k = 0; k < count; k++) {
      const names = perExpertNames(layer, first + k);
      gateUp.set(take(names.gate), 2 * k * block);
      gateUp.set(take(names.up), (2 * k + 1) * block);
      down.set(take(names.down), k * block);
    }
    const f = fusedExpertNames(layer);
    const piece = (name: string, shape: number[], data: Float32Array): HostShard => ({
      shape,
      dtype: 'F32',
      placements: placements({ name, dtype: 'F32', shape }),
      box: { offset: [first, 0, 0], shape: [count, ...shape.slice(1)] },
      data,
    });
    shards.set(f.gateUp, piece(f.gateUp, [E, 2 * I, H], gateUp));
    shards.set(f.down, piece(f.down, [E, H, I], down));
  }
}
