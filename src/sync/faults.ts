/**
 * Internal fault injection for weight-sync verification tests (not exported by the
 * package): a fault armed on a rank (setSyncFault) is applied inside the next full syncs
 * of that rank's engine, in the real sync path, until cleared. Kinds:
 *
 *   transpose     runtime parameter `param` written with its last two dims swapped (per expert)
 *   swap-gate-up  the gate and up halves of `param` (gate_up_proj / experts.w13_weight) exchanged
 *   wrong-slice   HF tensor `tensor` written from the next TP rank's slice (loader plan shifted)
 *   stale         HF tensor `tensor` (alone in its runtime parameter) not written: it keeps the
 *                 previous sync's bytes (colocated: its writes are skipped; server: restored)
 *   add           `delta` added to element `element` of `param`
 *   scale         `param` multiplied by `factor`
 *   process-twice the post-load processing (the experts' dim swap) applied a second time
 *   corrupt-received  server, gathered round: `delta` added to element `element` of the
 *                 slot the round was received into, before it is sliced into the parameters
 *                 (a wrong byte in transit)
 *   die           server: the rank fails inside the sync, after its reload session began and
 *                 before it takes part in any transfer (its peers are left in the collective)
 */
import { copy, permute, scale, axpy, Tensor } from '../runtime/device/device-index.js';
import { stridedRead, viewOf } from '../runtime/device/views.js';
import type { RolloutEngine } from '../rollout/engine.js';

export type SyncFault =
  | { kind: 'transpose'; param: string }
  | { kind: 'swap-gate-up'; param: string }
  | { kind: 'wrong-slice'; tensor: string }
  | { kind: 'stale'; tensor: string; param: string }
  | { kind: 'add'; param: string; element: number; delta: number }
  | { kind: 'scale'; param: string; factor: number }
  | { kind: 'process-twice' }
  | { kind: 'corrupt-received'; element: number; delta: number }
  | { kind: 'die' };

let armed: SyncFault | null = null;

/** Arms `f` for this rank's next full syncs (null disarms). */
export function setSyncFault(f: SyncFault | null): void {
  armed = f;
}

export interface FaultHooks {
  /** The HF tensor's writes are to be skipped (colocated 'stale'). */
  skips(tensor: string): boolean;
  /** Applies the fault to the engine's processed parameters (after the sync's writes, on its stream). */
  after(): void;
  /** A gathered round was received into `slot` (enqueued on the engine's stream; nothing sliced from it yet). */
  received(slot: Tensor): void;
  /** Undoes plan changes (call in finally). */
  restore(): void;
}

/** The slice a sync writes an HF tensor through (a slot's region, or a loader slice write): shifted in place by 'wrong-slice'. */
export interface FaultRegion {
  view: readonly number[];
  dim: number;
  start: number;
  len: number;
}

/**
 * The armed fault's hooks for a full sync into `engine` (null when none is armed).
 * `regionOf`: the slice the sync writes HF tensor `name` through (colocated: the region of
 * this rank's slot of it; server: the reload session's slice write), shifted in place for
 * 'wrong-slice' until restore().
 */
export function syncFault(engine: RolloutEngine, regionOf: (name: string) => FaultRegion | undefined, mode: 'colocate' | 'server'): FaultHooks | null {
  const f = armed;
  if (!f) return null;
  if (f.kind === 'die') throw new Error(`injected failure: engine rank on device ${engine.device.ordinal} dies inside the sync`);
  const stream = engine.stream;
  const undo: Array<() => void> = [];
  let snapshot: Tensor | null = null;
  if (f.kind === 'wrong-slice') {
    const r = regionOf(f.tensor);
    if (r) {
      const start = r.start;
      r.start = (start + r.len) % r.view[r.dim]!;
      undo.push(() => (r.start = start));
    }
  }
  if (f.kind === 'stale' && mode === 'server') {
    const p = engine.params.get(f.param);
    snapshot = Tensor.empty(engine.device, [p.tensor!.numel], p.tensor!.dtype);
    copy(snapshot, p.tensor!.reshape([p.tensor!.numel]), { stream });
  }
  const flat = (name: string) => {
    const t = engine.params.get(name).tensor!;
    return t.reshape([t.numel]);
  };
  const addAt = (t: Tensor, element: number, delta: number) => {
    const c = Tensor.fromArray(engine.device, Float32Array.from([delta]), [1], { dtype: t.dtype, stream });
    axpy(viewOf(t, [1], element), 1, c, { stream });
    c.release();
  };
  let corrupted = false;
  return {
    skips: (tensor) => f.kind === 'stale' && mode === 'colocate' && tensor === f.tensor,
    received: (slot) => {
      if (f.kind !== 'corrupt-received' || corrupted) return;
      corrupted = true; // the first gathered round only
      addAt(slot, f.element, f.delta);
    },
    after: () => {
      switch (f.kind) {
        case 'transpose': {
          const p = engine.params.get(f.param);
          const s = p.spec.procShape;
          const t = s.length === 3 ? permute(p.tensor!.reshape(s), [0, 2, 1], { stream }) : permute(p.tensor!.reshape(s), [1, 0], { stream });
          copy(flat(f.param), t.reshape([t.numel]), { stream });
          t.release();
          break;
        }
        case 'swap-gate-up': {
          const p = engine.params.get(f.param);
          const s = p.spec.procShape;
          // Dense gate_up [2·Il, H]: halves of the rows; experts w13 [E, H, 2·Im]: halves of the last dim.
          const [outer, inner] = s.length === 3 ? [s[0]! * s[1]!, s[2]! / 2] : [1, (s[0]! / 2) * s[1]!];
          const a = permute(flat(f.param).reshape([outer, 2, inner]), [1, 0, 2], { stream }).reshape([2 * outer * inner]);
          const b = Tensor.empty(engine.device, [2 * outer * inner], p.tensor!.dtype);
          copy(viewOf(b, [outer * inner], 0), viewOf(a, [outer * inner], outer * inner), { stream });
          copy(viewOf(b, [outer * inner], outer * inner), viewOf(a, [outer * inner], 0), { stream });
          stridedRead(flat(f.param), b, [outer, 2, inner], [inner, outer * inner, 1], 0, stream);
          a.release();
          b.release();
          break;
        }
        case 'add':
          addAt(flat(f.param), f.element, f.delta);
          break;
        case 'scale': {
          const y = scale(flat(f.param), f.factor, { stream });
          copy(flat(f.param), y, { stream });
          y.release();
          break;
        }
        case 'process-twice':
          for (const p of engine.params.params.values()) {
            if (!p.spec.swapOnProcess) continue;
            const [E, A, B] = p.spec.preShape as [number, number, number];
            const out = Tensor.empty(engine.device, [E * A * B], p.spec.dtype);
            stridedRead(out, flat(p.name), [E, B, A], [A * B, 1, B], 0, stream);
            copy(flat(p.name), out, { stream });
            out.release();
          }
          break;
        case 'stale':
          if (snapshot) copy(flat(f.param), snapshot, { stream });
          break;
        case 'wrong-slice':
        case 'corrupt-received':
          break;
      }
    },
    restore: () => {
      for (const u of undo) u();
      snapshot?.release();
      snapshot = null;
    },
  };
}
