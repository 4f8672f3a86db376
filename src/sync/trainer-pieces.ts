/**
 * The trainer side of sync verification: what each trainer rank owns of every canonical
 * tensor, as pieces (a local tensor + the affine view mapping its elements to canonical
 * indices). Over a strategy's ranks the pieces cover every canonical element exactly
 * once (Shard pieces on their owner; a Replicate one on one designated rank), so
 * fingerprints summed over the trainer group are those of the whole tensors.
 *
 * - single: every tensor of the store, whole.
 * - fsdp2: rank q's padded dim-0 chunk: canonical [q·chunk, (q+1)·chunk), padding cut by `limit`.
 * - megatron (mesh [dp, tp]): TP shards on dp rank 0 (linear_qkv de-interleaved into
 *   q / k / v by strides, gate ‖ up halves, row-parallel column blocks); replicated dense
 *   tensors on rank (0, 0); experts (whole per expert) on tp rank 0 of the first
 *   expert-data-parallel replica, at their global expert index.
 */
import type { Tensor } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import type { ModelConfig } from '../model/config.js';
import { fusedExpertNames } from '../model/params.js';
import { Fsdp2Strategy } from '../train/fsdp2/strategy.js';
import { MegatronStrategy } from '../train/megatron/strategy.js';
import { megatronSpecs, expertNames } from '../train/megatron/bridge.js';
import { SingleDeviceStrategy } from '../train/single.js';
import type { TrainStrategy } from '../train/strategy.js';
import { flatView, type AffineView } from './fingerprint.js';
import { hfNameOfReplicated } from './megatron-hf.js';
import { isLoraName } from './colocate-sources.js';
import { canonicalTensors } from './regions.js';

export interface Piece {
  tensor: string;
  src: Tensor;
  view: AffineView;
  /** Canonical indices at or past this are padding (fsdp2). */
  limit?: number;
}

const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

export function trainerPieces(s: TrainStrategy): Piece[] {
  if (s instanceof SingleDeviceStrategy) {
    return canonicalTensors(s.cfg).map(({ name }) => {
      const t = s.store.get(name).value;
      return { tensor: name, src: t, view: flatView(t.numel) };
    });
  }
  if (s instanceof Fsdp2Strategy) {
    const shards = s.localShards();
    const q = s.comm.rank;
    return s.plan.units.flatMap((u) => u.params.filter((p) => !isLoraName(p.name)).map((p) => ({
      tensor: p.name, src: shards.get(u.key)!.param, view: flatView(p.chunk, p.offset, q * p.chunk), limit: numel(p.shape),
    })));
  }
  if (s instanceof MegatronStrategy) return megatronPieces(s);
  throw new InvalidArgumentError(`Weight sync verification: unsupported strategy kind ${String((s as TrainStrategy).kind)}.`);
}

function megatronPieces(s: MegatronStrategy): Piece[] {
  const cfg: ModelConfig = s.cfg;
  const { hiddenSize: H, headDim: D, numHeads: nH, numKvHeads: nKV } = cfg;
  const [d, t] = s.mesh.coordinate as [number, number];
  const { tp, ep } = s.sizes;
  const local = s.localTensors('params');
  const out: Piece[] = [];
  const E = cfg.moe?.numExperts ?? 0, El = E / ep;
  const expertOwner = t === 0 && Math.floor(d / ep) === 0;
  for (const spec of megatronSpecs(cfg)) {
    const p = `model.layers.${spec.layer}`;
    if (spec.expert !== undefined) {
      if (!expertOwner || spec.expert >= El) continue; // local index spec.expert → global (d % ep)·El + spec.expert
      const fc = spec.name.endsWith('linear_fc1.weight') ? 'fc1' : 'fc2';
      const x = local.get(expertNames(spec.layer!, spec.expert)[fc])!;
      const e = (d % ep) * El + spec.expert;
      const f = fusedExpertNames(spec.layer!);
      out.push({ tensor: fc === 'fc1' ? f.gateUp : f.down, src: x, view: flatView(x.numel, 0, e * x.numel) });
      continue;
    }
    const x = local.get(spec.name)!;
    if (spec.tp === 'replicated') {
      if (d === 0 && t === 0) out.push({ tensor: hfNameOfReplicated(spec), src: x, view: flatView(x.numel) });
      continue;
    }
    if (d !== 0) continue;
    if (spec.name.endsWith('linear_qkv.weight')) {
      // Local rows: `groups` query groups of (g + 2)·D rows: g·D of q, D of k, D of v.
      const g = nH / nKV, groups = nKV / tp, row = (g + 2) * D * H;
      out.push({ tensor: `${p}.self_attn.q_proj.weight`, src: x, view: { shape: [groups, g * D * H], local: [row, 1], localOffset: 0, global: [g * D * H, 1], globalOffset: t * groups * g * D * H } });
      out.push({ tensor: `${p}.self_attn.k_proj.weight`, src: x, view: { shape: [groups, D * H], local: [row, 1], localOffset: g * D * H, global: [D * H, 1], globalOffset: t * groups * D * H } });
      out.push({ tensor: `${p}.self_attn.v_proj.weight`, src: x, view: { shape: [groups, D * H], local: [row, 1], localOffset: (g + 1) * D * H, global: [D * H, 1], globalOffset: t * groups * D * H } });
    } else if (spec.tp === 'gate-up') {
      const Il = spec.shape[0]! / 2 / tp;
      out.push({ tensor: `${p}.mlp.gate_proj.weight`, src: x, view: flatView(Il * H, 0, t * Il * H) });
      out.push({ tensor: `${p}.mlp.up_proj.weight`, src: x, view: flatView(Il * H, Il * H, t * Il * H) });
    } else if (spec.tp === 'row') {
      const [R, C] = spec.shape as [number, number];
      const Cl = C / tp;
      const tensor = spec.name.endsWith('linear_proj.weight') ? `${p}.self_attn.o_proj.weight` : `${p}.mlp.down_proj.weight`;
      out.push({ tensor, src: x, view: { shape: [R, Cl], local: [Cl, 1], localOffset: 0, global: [C, 1], globalOffset: t * Cl } });
    } else throw new InvalidArgumentError(`Weight sync verification: no canonical mapping for ${spec.name}.`);
  }
  return out;
}
