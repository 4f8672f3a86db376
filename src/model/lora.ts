/**
 * LoRA adapters for the Qwen3 / Qwen3.5 dense and MoE models (PEFT-like).
 *
 * Adapter parameter names (exact):
 * - dense projection `model.layers.L.<module>.weight` [out, in] (module self_attn.{q,k,v,o}_proj,
 *   mlp.{gate,up,down}_proj, or a Qwen3.5 one of lora-config.ts's LORA_MODULES):
 *     `model.layers.L.<module>.lora_A.weight` [r, in], `model.layers.L.<module>.lora_B.weight` [out, r]
 * - fused experts `model.layers.L.mlp.experts.gate_up_proj` [E, 2I, H] / `.down_proj` [E, H, I]
 *   (one pair per expert, grouped):
 *     `model.layers.L.mlp.experts.gate_up_proj.lora_A` [E, r, H], `….gate_up_proj.lora_B` [E, 2I, r]
 *     `model.layers.L.mlp.experts.down_proj.lora_A` [E, r, I],    `….down_proj.lora_B` [E, H, r]
 * The adapted weight is W + s·B·A with s = alpha / rank (per expert for fused experts).
 *
 * Init as PEFT: A ~ U(−1/√in, 1/√in) (Kaiming-uniform with a = √5), seeded per adapter name;
 * B = 0, so the adapted model starts equal to the base.
 *
 * The forward goes through Qwen3Model's ProjectionHooks, built from a parameter LOOKUP
 * `(tape, name) => Var` rather than a ParamStore, so a sharded strategy can hand in
 * gathered adapter Vars. `merge()` / `unmerge()` fold s·B·A into (out of) the base weights on
 * the device; while merged, the hooks refuse to run (they would apply the update twice).
 */
import { axpy, matmul, Tensor, type Stream } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import type { Tape, Var } from './autograd.js';
import type { ModelConfig } from './config.js';
import type * as F from './functional.js';
import { loraGrouped, loraLinear, dropoutMaskWindow } from './lora-ops.js';
import { parseLoraConfig, resolveLoraTargets, type LoraConfig, type LoraConfigInput, type LoraTarget } from './lora-config.js';
import type { HostParam, ParamStore } from './param-store.js';
import { fusedExpertNames } from './params.js';
import { hashString, mixSeed, Prng } from './prng.js';
import type { ProjectionHooks } from './qwen3.js';

/** Where the hooks get a parameter (base weight or adapter) for this forward. */
export type ParamLookup = (tape: Tape, name: string) => Var;
/** Where merge / unmerge get device tensors (base weights are updated in place). */
export type TensorLookup = (name: string) => Tensor;

export interface LoraParamSpec {
  name: string;
  shape: number[];
  /** The adapted base weight's HF name. */
  base: string;
  kind: LoraTarget['kind'];
  role: 'A' | 'B';
  layer: number;
}

/** Adapter parameter specs of `cfg` under a LoRA config (A then B per target, HF order). */
export function loraParamSpecs(cfg: ModelConfig, lora: LoraConfigInput | LoraConfig): LoraParamSpec[] {
  const targets = resolveLoraTargets(cfg, parseLoraConfig(lora));
  return targets.flatMap((t) => [
    { name: t.a, shape: t.aShape, base: t.base, kind: t.kind, role: 'A' as const, layer: t.layer },
    { name: t.b, shape: t.bShape, base: t.base, kind: t.kind, role: 'B' as const, layer: t.layer },
  ]);
}

export class LoraAdapters {
  readonly config: LoraConfig;
  readonly targets: readonly LoraTarget[];
  /** alpha / rank. */
  readonly scaling: number;
  private readonly byBase: ReadonlyMap<string, LoraTarget>;
  private mergedState = false;

  constructor(
    readonly cfg: ModelConfig,
    lora: LoraConfigInput | LoraConfig,
  ) {
    this.config = parseLoraConfig(lora);
    this.targets = resolveLoraTargets(cfg, this.config);
    this.scaling = this.config.alpha / this.config.rank;
    this.byBase = new Map(this.targets.map((t) => [t.base, t]));
  }

  /** Every adapter parameter name (A then B per target). */
  get names(): string[] {
    return this.targets.flatMap((t) => [t.a, t.b]);
  }

  /** The adapter of base weight `name`, if adapted. */
  target(base: string): LoraTarget | undefined {
    return this.byBase.get(base);
  }

  get merged(): boolean {
    return this.mergedState;
  }

  /** PEFT init on the host: A Kaiming-uniform (seed: config.seed unless given), B zeros. */
  initHost(seed = this.config.seed): Map<string, HostParam> {
    const out = new Map<string, HostParam>();
    const base = mixSeed(seed);
    for (const t of this.targets) {
      const fanIn = t.aShape[t.aShape.length - 1]!;
      const bound = 1 / Math.sqrt(fanIn);
      const a = new Float32Array(t.aShape.reduce((x, y) => x * y, 1));
      const rng = new Prng(base ^ hashString(t.a));
      for (let i = 0; i < a.length; i++) a[i] = (2 * rng.next() - 1) * bound;
      out.set(t.a, { shape: [...t.aShape], data: a });
      out.set(t.b, { shape: [...t.bShape], data: new Float32Array(t.bShape.reduce((x, y) => x * y, 1)) });
    }
    return out;
  }

  /** Checks host adapter params are exactly this config's (names and shapes). */
  checkHost(host: ReadonlyMap<string, HostParam>): void {
    const want = new Map(
      this.targets.flatMap(
        (t) =>
          [
            [t.a, t.aShape],
            [t.b, t.bShape],
          ] as const,
      ),
    );
    const missing = [...want.keys()].filter((n) => !host.has(n));
    const extra = [...host.keys()].filter((n) => !want.has(n));
    if (missing.length || extra.length) {
      throw new InvalidArgumentError(
        `LoRA parameters do not match the LoRA config: missing [${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ', …' : ''}], unexpected [${extra.slice(0, 5).join(', ')}${extra.length > 5 ? ', …' : ''}]. HINT: build them with LoraAdapters.initHost() for the same config.`,
        { missing, extra },
      );
    }
    for (const [name, shape] of want) {
      const p = host.get(name)!;
      if (p.shape.length !== shape.length || p.shape.some((d, i) => d !== shape[i]) || p.data.length !== shape.reduce((x, y) => x * y, 1)) {
        throw new InvalidArgumentError(`LoRA parameter ${name} has shape [${p.shape.join(', ')}] but rank ${this.config.rank} needs [${shape.join(', ')}].`, {
          name,
        });
      }
    }
  }

  /**
   * Uploads adapter params into `store` (initHost() when not given) and freezes everything
   * else: only the adapters get gradients and AdamW updates.
   */
  attach(store: ParamStore, stream: Stream, host: ReadonlyMap<string, HostParam> = this.initHost()): void {
    this.checkHost(host);
    store.addParams(host, stream);
    store.setTrainable(this.names);
  }

  /** Projection hooks reading base weights and adapters through `lookup`. */
  hooks(lookup: ParamLookup): LoraHooks {
    return new LoraHooks(this, lookup);
  }

  /** W ← W + s·B·A for every target, on `stream` (fused experts: batched per-expert matmul). */
  merge(lookup: TensorLookup, stream: Stream): void {
    if (this.mergedState)
      throw new InvalidArgumentError(
        'LoRA merge(): the adapters are already merged into the base weights. HINT: unmerge() first; merging twice would add B·A twice.',
      );
    this.apply(lookup, stream, 1);
    this.mergedState = true;
  }

  /** W ← W − s·B·A: restores the base weights within fp32 rounding. */
  unmerge(lookup: TensorLookup, stream: Stream): void {
    if (!this.mergedState)
      throw new InvalidArgumentError(
        'LoRA unmerge(): the adapters are not merged. HINT: call merge() first; unmerging now would subtract B·A from the base weights.',
      );
    this.apply(lookup, stream, -1);
    this.mergedState = false;
  }

  private apply(lookup: TensorLookup, stream: Stream, sign: 1 | -1): void {
    const tensors = this.targets.map((t) => ({ t, w: lookup(t.base), a: lookup(t.a), b: lookup(t.b) }));
    // Check every shape before touching any weight (no half-merged state on a bad lookup).
    for (const { t, w, a, b } of tensors) {
      for (const [name, x, shape] of [
        [t.base, w, t.baseShape],
        [t.a, a, t.aShape],
        [t.b, b, t.bShape],
      ] as const) {
        if (x.shape.length !== shape.length || x.shape.some((d, i) => d !== shape[i])) {
          throw new InvalidArgumentError(
            `LoRA merge: ${name} is [${x.shape.join(', ')}] but [${shape.join(', ')}] is expected. HINT: merge needs full (unsharded) tensors.`,
            { name },
          );
        }
      }
    }
    for (const { w, a, b } of tensors) {
      const ba = matmul(b, a, { stream });
      axpy(w, sign * this.scaling, ba, { stream });
      ba.release(); // pending ops keep the buffer alive until they ran
    }
  }
}

/**
 * ProjectionHooks for Qwen3Model and Qwen35Model. `dropoutSeed` is the per-step seed of the dropout masks;
 * null (the default) means no dropout (evaluation). Set it before each training forward.
 */
export class LoraHooks implements ProjectionHooks {
  dropoutSeed: number | null = null;
  /**
   * Where this forward's tokens sit in the global batch (a data-parallel rank runs rows
   * [row0, row0 + rows) of `total` token rows; `seq`: its sequences trimmed from `global` to
   * `local` positions): the masks are windows of the global mask, so sharded and trimmed
   * runs drop exactly what the single-device untrimmed run drops. null: the forward's tokens
   * are the whole batch.
   */
  dropoutWindow: { row0: number; total: number; seq?: { global: number; local: number } } | null = null;

  constructor(
    readonly adapters: LoraAdapters,
    private readonly lookup: ParamLookup,
  ) {}

  linear(tape: Tape, x: Var, weight: Var, name: string): Var | undefined {
    const t = this.adapters.target(name);
    if (!t) return undefined;
    this.checkUnmerged();
    const p = this.adapters.config.dropout;
    let mask: Tensor | undefined;
    if (p > 0 && this.dropoutSeed !== null) {
      const [rows, cols] = x.value.shape as [number, number];
      const w = this.dropoutWindow ?? { row0: 0, total: rows };
      const win = { row0: w.row0, rows, col0: 0, cols, ...(w.seq ? { seq: w.seq } : {}) };
      const host = dropoutMaskWindow(this.dropoutSeed, name, p, { rows: w.total, cols }, win);
      mask = tape.own(Tensor.fromArray(x.value.device, host, x.value.shape, { stream: tape.stream }));
    }
    return loraLinear(tape, x, weight, this.lookup(tape, t.a), this.lookup(tape, t.b), this.adapters.scaling, mask);
  }

  moeWeights(tape: Tape, layer: number): Partial<F.MoeAdapters> | undefined {
    const names = fusedExpertNames(layer);
    const gu = this.adapters.target(names.gateUp);
    const dn = this.adapters.target(names.down);
    if (!gu && !dn) return undefined;
    this.checkUnmerged();
    const s = this.adapters.scaling;
    const out: Partial<F.MoeAdapters> = {};
    if (gu) out.gateUp = (tp, xs, w, offsets) => loraGrouped(tp, xs, w, this.lookup(tp, gu.a), this.lookup(tp, gu.b), s, offsets, 'experts.gate_up');
    if (dn) out.down = (tp, xs, w, offsets) => loraGrouped(tp, xs, w, this.lookup(tp, dn.a), this.lookup(tp, dn.b), s, offsets, 'experts.down');
    return out;
  }

  private checkUnmerged(): void {
    if (this.adapters.merged) {
      throw new InvalidArgumentError(
        'LoRA hooks: the adapters are merged into the base weights, so applying them again would double the update. HINT: unmerge() first, or run the model without the LoRA hooks while merged.',
      );
    }
  }
}

/** A per-forward dropout seed from the config seed, the optimizer step and the micro-batch. */
export function loraStepSeed(seed: number, step: number, micro = 0): number {
  return mixSeed(mixSeed(seed) ^ Math.imul(step + 1, 0x9e3779b1) ^ Math.imul(micro + 1, 0x85ebca6b));
}
