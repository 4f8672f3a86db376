/**
 * Server-mode sync plan: what each trainer rank sends ("pieces": what it owns, no
 * duplicates over the trainer group) and how the engine side puts pieces back together.
 * Every rank computes every trainer rank's pieces from the exchanged header (strategy
 * kind, sizes, strategy rank), so all ranks agree on the broadcast schedule.
 *
 * - fsdp2 (dp ranks): rank q sends the padded dim-0 chunk q of every parameter; the dp
 *   chunks side by side are the padded full tensor (its first numel elements).
 * - megatron (rank = d·tp + t): ranks with d = 0 send their TP shards of the split
 *   tensors (listed first, so the tp ranks' buckets line up); rank 0 adds the
 *   replicated dense tensors; ranks t = 0, d < ep add their local experts (global index).
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import type { ModelConfig } from '../model/config.js';
import { planLayout } from '../train/fsdp2/layout.js';
import { expertNames, megatronSpecs, type MegatronSpec } from '../train/megatron/bridge.js';

export const KIND_CODES = { fsdp2: 1, megatron: 2 } as const;

export interface SourceHeader {
  kind: keyof typeof KIND_CODES;
  tp: number;
  dp: number;
  ep: number;
}

export interface Piece {
  /** The assembled tensor's name (HF for fsdp2, Megatron for megatron). */
  name: string;
  /** Which part of it (fsdp2 chunk index / tp shard index; 0 when whole). */
  part: number;
  bytes: number;
}

/** How a named tensor is assembled: `parts` pieces of `partNumel` elements side by side. */
export interface Assembly {
  name: string;
  parts: number;
  partNumel: number;
  /** fsdp2: the full HF shape (a prefix of the padded parts); megatron: the spec. */
  shape: number[];
  spec?: MegatronSpec;
}

const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

export function piecesOf(cfg: ModelConfig, h: SourceHeader, rank: number): Piece[] {
  if (h.kind === 'fsdp2') {
    const plan = planLayout(cfg, h.dp);
    return plan.units.flatMap((u) => u.params.map((p) => ({ name: p.name, part: rank, bytes: p.chunk * 4 })));
  }
  const d = Math.floor(rank / h.tp), t = rank % h.tp;
  const specs = megatronSpecs(cfg);
  const out: Piece[] = [];
  if (d === 0) for (const s of specs) if (s.expert === undefined && s.tp !== 'replicated') out.push({ name: s.name, part: t, bytes: (numel(s.shape) / h.tp) * 4 });
  if (rank === 0) for (const s of specs) if (s.expert === undefined && s.tp === 'replicated') out.push({ name: s.name, part: 0, bytes: numel(s.shape) * 4 });
  if (t === 0 && d < h.ep && cfg.moe) {
    const El = cfg.moe.numExperts / h.ep;
    for (const s of specs) {
      if (s.expert === undefined || s.expert < (d % h.ep) * El || s.expert >= (d % h.ep + 1) * El) continue;
      out.push({ name: s.name, part: 0, bytes: numel(s.shape) * 4 });
    }
  }
  return out;
}

/** Every tensor the engine side assembles, by name. */
export function assemblies(cfg: ModelConfig, h: SourceHeader): Map<string, Assembly> {
  const out = new Map<string, Assembly>();
  if (h.kind === 'fsdp2') {
    for (const u of planLayout(cfg, h.dp).units) for (const p of u.params) out.set(p.name, { name: p.name, parts: h.dp, partNumel: p.chunk, shape: [...p.shape] });
    return out;
  }
  for (const s of megatronSpecs(cfg)) {
    const split = s.expert === undefined && s.tp !== 'replicated';
    out.set(s.name, { name: s.name, parts: split ? h.tp : 1, partNumel: numel(s.shape) / (split ? h.tp : 1), shape: s.shape, spec: s });
  }
  return out;
}

/** Checks the header trainer rank 0 sent against the trainer group size. */
export function checkHeader(h: SourceHeader, trainerRanks: number): void {
  if (h.tp * h.dp !== trainerRanks) {
    throw new InvalidArgumentError(`ServerSync: the trainer strategy spans ${h.tp * h.dp} ranks (tp ${h.tp} x dp ${h.dp}) but trainerRanks is ${trainerRanks}. HINT: pass trainerRanks = the strategy's rank count.`, { trainerRanks });
  }
}

export { expertNames };
