/**
 * LoRA on the rollout engine: an adapter sync. The engine keeps a device copy of the
 * BASE runtime tensors of every parameter an adapter touches (taken from the engine's
 * current weights at the first adapter sync after a full sync), and an adapter sync
 * rewrites those parameters as base + scaling·B·A directly in the processed layout:
 * B·A is formed as the full HF-shaped delta (batched per expert for fused experts), cut
 * for this TP rank by the same slot writes a full colocated sync uses (zero outside
 * the adapted part, e.g. k/v of qkv_proj when only q_proj is adapted), and added to the
 * base. The writes are one DirectSession, so no post-load processing can run; nothing else
 * changes.
 */
import { axpy, cast, copy, fill, matmul, Tensor } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import { slotWrite, type DirectWrite } from './direct-write.js';
import type { RolloutEngine } from './engine.js';

/** One adapted HF weight: its adapter A / B device tensors (full, HF-PEFT shapes). */
export interface EngineAdapter {
  base: string;
  a: Tensor;
  b: Tensor;
}

const state = new WeakMap<RolloutEngine, { base: Map<string, Tensor> | null }>();

/** A full sync replaced every weight: the next adapter sync takes the base copy afresh. */
export function markEngineBaseWeights(engine: RolloutEngine): void {
  const s = state.get(engine);
  if (s?.base) for (const t of s.base.values()) t.release();
  state.set(engine, { base: null });
}

/** The engine's base copies of the adapted runtime parameters (processed layout), or null before the first adapter sync after a full sync. */
export function engineBaseCopies(engine: RolloutEngine): ReadonlyMap<string, Tensor> | null {
  return state.get(engine)?.base ?? null;
}

/** Frees the engine's base copies (e.g. before releasing the engine). */
export function releaseEngineLora(engine: RolloutEngine): void {
  markEngineBaseWeights(engine);
  state.delete(engine);
}

/**
 * Adapter sync: every runtime parameter touched by `adapters` becomes base + scaling·ΣB·A,
 * in one direct session (opened here; aborted when a write fails, so the engine takes the
 * next sync). Returns the runtime parameters written.
 */
export function applyEngineAdapters(engine: RolloutEngine, adapters: readonly EngineAdapter[], scaling: number): string[] {
  if (!(typeof scaling === 'number' && Number.isFinite(scaling)))
    throw new InvalidArgumentError(`applyEngineAdapters(): scaling must be a finite number but is ${String(scaling)}.`);
  const stream = engine.stream;
  const slots = engine.weightSlots();
  const byParam = new Map<string, Array<{ ad: EngineAdapter; write: DirectWrite }>>();
  for (const ad of adapters) {
    const mine = slots.filter((s) => s.hf === ad.base);
    if (!mine.length) {
      throw new InvalidArgumentError(
        `Adapter sync: ${JSON.stringify(ad.base)} is no HF weight of this ${engine.cfg.modelType} engine. HINT: adapt the HF names the engine publishes (engine.weightSlots(); experts fused: mlp.experts.gate_up_proj / down_proj).`,
        { tensor: ad.base },
      );
    }
    for (const w of mine.map(slotWrite)) {
      let l = byParam.get(w.param);
      if (!l) byParam.set(w.param, (l = []));
      l.push({ ad, write: w });
    }
  }
  // Opened before the base copy is taken, so an engine that refuses the session (busy,
  // asleep, another session open) is left as it was.
  const session = engine.beginDirect();
  try {
    let s = state.get(engine);
    if (!s) state.set(engine, (s = { base: null }));
    if (!s.base) {
      s.base = new Map();
      for (const name of byParam.keys()) {
        const p = engine.params.get(name);
        if (p.state !== 'processed' || !p.tensor)
          throw new InvalidArgumentError(
            `Adapter sync: runtime parameter ${name} is '${p.state}'; the engine needs its base weights first. HINT: run a full sync before the first adapter sync.`,
            { parameter: name },
          );
        const t = Tensor.empty(engine.device, p.tensor.shape, p.tensor.dtype);
        copy(t, p.tensor, { stream });
        s.base.set(name, t);
      }
    }
    for (const [param, list] of byParam) {
      const base = s.base!.get(param);
      if (!base)
        throw new InvalidArgumentError(
          `Adapter sync: no base copy of ${param} (the adapted set changed since the last full sync). HINT: run a full sync first.`,
          { parameter: param },
        );
      const delta = Tensor.empty(engine.device, base.shape, 'fp32');
      fill(delta, 0, { stream });
      for (const { ad, write } of list) {
        const ba = matmul(ad.b, ad.a, { stream });
        write.write(delta.reshape(engine.params.get(param).spec.procShape), ba, stream);
        ba.release();
      }
      session.writeInPlace(param, (dst, st) => {
        const flat = dst.reshape([dst.numel]);
        if (dst.dtype === 'fp32') {
          copy(flat, base.reshape([base.numel]), { stream: st });
          axpy(flat, scaling, delta.reshape([delta.numel]), { stream: st });
          return;
        }
        // A bf16 weight (weight-dtype.ts): the sum is formed in fp32, then rounded once.
        const sum = cast(base.reshape([base.numel]), 'fp32', { stream: st });
        axpy(sum, scaling, delta.reshape([delta.numel]), { stream: st });
        const low = cast(sum, dst.dtype, { stream: st });
        copy(flat, low, { stream: st });
        sum.release();
        low.release();
      });
      delta.release();
    }
    session.finish();
  } finally {
    if (session.open) session.abort();
  }
  return [...byParam.keys()];
}
