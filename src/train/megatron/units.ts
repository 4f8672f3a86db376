/**
 * What one Megatron rank holds: its parameter "units" (one device tensor each) with
 * their bucketed gradients. A dense unit is one Megatron tensor's TP shard (or the
 * whole tensor when replicated over tp); an expert unit stacks the local experts of
 * one MoE layer ([El, 2I, H] linear_fc1 or [El, H, I] linear_fc2) so the grouped
 * matmul runs on it, and exposes each expert under its Megatron name with the LOCAL
 * expert index as a view.
 *
 * Only trainable units get gradients (with LoRA: the adapters; base units are frozen).
 * Gradients live in two flat buckets per group ('dense': replicated over dp,
 * 'expert': replicated over the dp/ep expert-data-parallel ranks, 'partial': LoRA
 * adapters whose gradient is partial per TP rank, summed over the world): `step` receives
 * one forwardBackward's gradients (the tape's Var.grad are views into it) and is
 * all-reduced as ONE collective per group; `acc` accumulates the reduced steps (what
 * zeroGrad clears, clipping scales and AdamW reads).
 */
import { fill, Tensor, type Device, type Stream } from '../../runtime/device/device-index.js';
import { Var } from '../../model/autograd.js';
import type { HostParam } from '../../model/param-store.js';
import { concat, expertNames, type MegatronSpec } from './bridge.js';
import type { LoraShardSpec } from './lora-shards.js';
import { splitViews } from './views.js';

/**
 * Gradient reduction group: 'dense' over dp, 'expert' over the expert-data-parallel ranks, 'partial' (LoRA
 * adapters whose gradient is a partial sum per TP rank) over the whole world (tp and dp).
 */
export type UnitGroup = 'dense' | 'expert' | 'partial';

export interface Unit {
  /** Megatron name (dense) or `decoder.layers.L.mlp.experts.linear_fc{1,2}` (stacked local experts). */
  name: string;
  group: UnitGroup;
  /** Dense: the full Megatron spec (for TP slicing / gathering). */
  spec?: MegatronSpec;
  /** Expert units: layer and which projection. */
  expert?: { layer: number; fc: 'fc1' | 'fc2' };
  /** LoRA adapter units (PEFT-named; `name` is the PEFT name): how the adapter is split. */
  lora?: LoraShardSpec;
  var: Var;
  /** Accumulated gradient (view into the group's `acc` bucket); unset for frozen units (LoRA base weights). */
  grad: Tensor;
  m?: Tensor;
  v?: Tensor;
}

export class GradBuckets {
  readonly step = new Map<UnitGroup, Tensor>();
  readonly acc = new Map<UnitGroup, Tensor>();

  constructor(device: Device, units: readonly Unit[], stream: Stream) {
    for (const group of ['dense', 'expert', 'partial'] as const) {
      const mine = units.filter((u) => u.group === group);
      if (!mine.length) continue;
      const n = mine.reduce((a, u) => a + u.var.value.numel, 0);
      const step = Tensor.zeros(device, [n], 'fp32', { stream });
      const acc = Tensor.zeros(device, [n], 'fp32', { stream });
      this.step.set(group, step);
      this.acc.set(group, acc);
      const shapes = mine.map((u) => u.var.value.shape);
      splitViews(step, shapes).forEach((g, i) => (mine[i]!.var.grad = g));
      splitViews(acc, shapes).forEach((g, i) => (mine[i]!.grad = g));
    }
  }

  zeroStep(stream: Stream): void {
    for (const t of this.step.values()) fill(t, 0, { stream });
  }

  zeroAcc(stream: Stream): void {
    for (const t of this.acc.values()) fill(t, 0, { stream });
  }

  release(): void {
    for (const t of [...this.step.values(), ...this.acc.values()]) t.release();
  }
}

/** The host data of this rank's stacked experts: global experts [first, first + El) of one layer, from full Megatron tensors. */
export function stackExperts(full: ReadonlyMap<string, HostParam>, layer: number, fc: 'fc1' | 'fc2', first: number, El: number): Float32Array {
  return concat(...Array.from({ length: El }, (_, e) => full.get(expertNames(layer, first + e)[fc])!.data));
}
