/**
 * The rollout engine's packed runtime parameters on one TP rank, each with its layout
 * state. Names and local shapes (H hidden, D head dim, I_tp / Im_tp intermediate per rank):
 *
 *   model.layers.L.self_attn.qkv_proj.weight   [(nH_tp + 2·nKV_tp)·D, H]  q ‖ k ‖ v rows
 *   model.layers.L.self_attn.o_proj.weight     [H, nH_tp·D]               row parallel
 *   model.layers.L.mlp.gate_up_proj.weight     [2·I_tp, H]                gate ‖ up of the slice
 *   model.layers.L.mlp.down_proj.weight        [H, I_tp]                  row parallel
 *   model.layers.L.mlp.experts.w13_weight      preprocessed [E, 2·Im_tp, H] → processed [E, H, 2·Im_tp]
 *   model.layers.L.mlp.experts.w2_weight       preprocessed [E, H, Im_tp]   → processed [E, Im_tp, H]
 *   embedding, norms, router (mlp.gate.weight), lm_head: HF names and shapes, replicated.
 *
 * Qwen3.5 (qwen35-layout.ts): a full-attention layer's qkv_proj holds q_proj twice as wide
 * (per head the query, then its output gate); a Gated DeltaNet layer has its HF tensors
 * (`linear_attn.*`) as runtime parameters of the same names, cut to the rank's heads
 * (gdn-shard.ts: in_proj_qkv / conv1d rows q ‖ k ‖ v of its heads); the Qwen3.5-MoE shared
 * expert packs `mlp.shared_expert.gate_up_proj.weight` [2·Is_tp, H] like the dense MLP, with
 * `shared_expert.down_proj` [H, Is_tp] row parallel and `shared_expert_gate` replicated.
 *
 * Dtype: fp32, except the matmul weights of a 'bfloat16' engine, which are bf16
 * (weight-dtype.ts); every write casts to the parameter's dtype, and checksums hash the
 * bytes held, so a bf16 parameter's checksum is that of the bf16 cast of its fp32 values.
 *
 * States: 'preprocessed' (written by the checkpoint loader, waiting for the reload
 * session's finish()), 'processed' (what the forward reads), 'offloaded' (sleep
 * level 1: bytes on the host), 'dropped' (sleep level 2: no bytes anywhere). Processing is
 * the identity for every parameter but the experts, whose two dims swap; it must run
 * exactly once per full reload, so every parameter records its state and the parts of it
 * the loader has filled, and every transition is checked here.
 */
import { createHash } from 'node:crypto';
import { Tensor, type Device, type Stream } from '../runtime/device/device-index.js';
import { stridedRead } from '../runtime/device/views.js';
import { dtypeSize, type DType } from '../runtime/device/dtype.js';
import { InvalidArgumentError, WeightLayoutError } from '../runtime/errors.js';
import { isMoeLayer, type ModelConfig } from '../model/config.js';
import type { TpShard } from './tp-shard.js';
import { isGdnLayer, qRowsPerHead } from './qwen35-layout.js';
import { gdnLocalTensors } from './gdn-shard.js';
import { runtimeDtypeOf, type EngineDtype } from './weight-dtype.js';

export type LayoutState = 'preprocessed' | 'processed' | 'offloaded' | 'dropped';
export type WriteLayout = 'preprocessed' | 'processed';

export interface RuntimeParamSpec {
  name: string;
  preShape: number[];
  procShape: number[];
  /** Processing swaps dims 1 and 2 (the experts); otherwise it is the identity. */
  swapOnProcess: boolean;
  /** Part keys a full reload must fill before processing (e.g. 'q', 'k', 'v' or 'gate.3'). */
  parts: string[];
  /** Device dtype of the parameter (weight-dtype.ts: bf16 for the matmul weights of a 'bfloat16' engine, else fp32). */
  dtype: DType;
}

const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);
const fmt = (s: readonly number[]) => `[${s.join(', ')}]`;

/** Every runtime parameter of `cfg` on the TP rank `shard`, in model order, for an engine of weight precision `dtype`. */
export function runtimeParamSpecs(cfg: ModelConfig, shard: TpShard, dtype: EngineDtype = 'float32'): RuntimeParamSpec[] {
  const { hiddenSize: H, headDim: D } = cfg;
  const specs: Array<Omit<RuntimeParamSpec, 'dtype'>> = [];
  const plain = (name: string, shape: number[], parts = ['all']) => specs.push({ name, preShape: shape, procShape: shape, swapOnProcess: false, parts });
  plain('model.embed_tokens.weight', [cfg.vocabSize, H]);
  for (let i = 0; i < cfg.numLayers; i++) {
    const p = `model.layers.${i}`;
    plain(`${p}.input_layernorm.weight`, [H]);
    if (isGdnLayer(cfg, i)) {
      for (const t of gdnLocalTensors(cfg, shard, i)) plain(t.name, t.local, t.parts);
    } else {
      plain(`${p}.self_attn.qkv_proj.weight`, [(qRowsPerHead(cfg) * shard.headsLocal + 2 * shard.kvHeadsLocal) * D, H], ['q', 'k', 'v']);
      plain(`${p}.self_attn.o_proj.weight`, [H, shard.headsLocal * D]);
      plain(`${p}.self_attn.q_norm.weight`, [D]);
      plain(`${p}.self_attn.k_norm.weight`, [D]);
    }
    plain(`${p}.post_attention_layernorm.weight`, [H]);
    if (isMoeLayer(cfg, i)) {
      const E = cfg.moe!.numExperts;
      const Im = shard.moeInterLocal;
      const experts = Array.from({ length: E }, (_, e) => e);
      plain(`${p}.mlp.gate.weight`, [E, H]);
      specs.push({
        name: `${p}.mlp.experts.w13_weight`,
        preShape: [E, 2 * Im, H],
        procShape: [E, H, 2 * Im],
        swapOnProcess: true,
        parts: experts.flatMap((e) => [`gate.${e}`, `up.${e}`]),
      });
      specs.push({
        name: `${p}.mlp.experts.w2_weight`,
        preShape: [E, H, Im],
        procShape: [E, Im, H],
        swapOnProcess: true,
        parts: experts.map((e) => `down.${e}`),
      });
      const Is = cfg.moe!.sharedExpertIntermediateSize;
      if (Is !== undefined) {
        const Isl = shard.sharedInterLocal;
        plain(`${p}.mlp.shared_expert.gate_up_proj.weight`, [2 * Isl, H], ['gate', 'up']);
        plain(`${p}.mlp.shared_expert.down_proj.weight`, [H, Isl]);
        plain(`${p}.mlp.shared_expert_gate.weight`, [1, H]);
      }
    } else {
      plain(`${p}.mlp.gate_up_proj.weight`, [2 * shard.interLocal, H], ['gate', 'up']);
      plain(`${p}.mlp.down_proj.weight`, [H, shard.interLocal]);
    }
  }
  plain('model.norm.weight', [H]);
  if (!cfg.tieWordEmbeddings) plain('lm_head.weight', [cfg.vocabSize, H]);
  return specs.map((s) => ({ ...s, dtype: runtimeDtypeOf(s.name, dtype) }));
}

/** One runtime parameter: its device tensor (when on the device), host copy (when offloaded) and state. */
export class RuntimeParam {
  tensor: Tensor | null = null;
  host: Uint8Array | null = null;
  state: LayoutState = 'dropped';
  /** The state to restore on wake from an 'offloaded' sleep. */
  stateBeforeSleep: LayoutState | null = null;
  readonly filled = new Set<string>();

  constructor(readonly spec: RuntimeParamSpec) {}

  get name(): string {
    return this.spec.name;
  }

  shapeOf(layout: WriteLayout): number[] {
    return layout === 'processed' ? this.spec.procShape : this.spec.preShape;
  }

  get nbytes(): number {
    return numel(this.spec.preShape) * dtypeSize(this.spec.dtype);
  }

  /** The device tensor viewed in `layout`'s shape (same bytes). */
  view(layout: WriteLayout): Tensor {
    return this.tensor!.reshape(this.shapeOf(layout));
  }

  layoutError(expected: string, hint: string): WeightLayoutError {
    return new WeightLayoutError(`Runtime parameter ${this.name} is '${this.state}' but '${expected}' was expected. HINT: ${hint}`, {
      parameter: this.name,
      expected,
      actual: this.state,
    });
  }
}

/** The rank's runtime parameters by name. */
export class RuntimeParams {
  readonly params = new Map<string, RuntimeParam>();

  constructor(
    readonly device: Device,
    specs: RuntimeParamSpec[],
  ) {
    for (const s of specs) this.params.set(s.name, new RuntimeParam(s));
  }

  get(name: string): RuntimeParam {
    const p = this.params.get(name);
    if (!p) {
      const near = [...this.params.keys()].filter((n) => n.split('.').pop() === name.split('.').pop()).slice(0, 3);
      throw new InvalidArgumentError(
        `No runtime parameter named ${JSON.stringify(name)}.${near.length ? ` Similar: ${near.join(', ')}.` : ''} HINT: runtime names use the packed forms (qkv_proj, gate_up_proj, experts.w13_weight / w2_weight).`,
        { argument: 'name', name },
      );
    }
    return p;
  }

  /** Device memory the parameters hold now, in bytes. */
  deviceBytes(): number {
    let n = 0;
    for (const p of this.params.values()) if (p.tensor) n += p.tensor.nbytes;
    return n;
  }

  /** Allocates the device tensor of `p` when it has none (its bytes are undefined until written). */
  ensureAllocated(p: RuntimeParam): Tensor {
    if (!p.tensor) p.tensor = Tensor.empty(this.device, p.spec.preShape, p.spec.dtype);
    return p.tensor;
  }

  /** Throws unless every parameter is 'processed' (what the forward reads). */
  checkReadyForForward(): void {
    for (const p of this.params.values()) {
      if (p.state === 'processed') continue;
      const hint =
        p.state === 'preprocessed'
          ? 'a reload was not finished: finish() the reload session (engine.beginReload() … finish()) before generating; an aborted reload must be run again.'
          : p.state === 'dropped'
            ? 'weights were dropped (sleep level 2, or never loaded): write them with a full reload (engine.beginReload() … finish()) or a direct session (engine.beginDirect() … write()) first.'
            : 'the engine is asleep: call wake() first.';
      throw p.layoutError('processed', hint);
    }
  }

  /**
   * Post-load processing of a full reload: every parameter must be 'preprocessed' and
   * completely filled (checked for all before anything changes), then the experts'
   * dims are swapped into the grouped-matmul layout and every state becomes 'processed'.
   */
  process(stream: Stream, hfNamesOfPart: (p: RuntimeParam, part: string) => string): void {
    for (const p of this.params.values()) {
      if (p.state === 'processed') {
        throw p.layoutError(
          'preprocessed',
          'the post-load processing (ReloadSession.finish()) runs exactly once per full reload, on weights the reload wrote; these are already processed (this reload never wrote them: an earlier reload or a direct write, which needs none). Pass every checkpoint tensor to the reload session before finish().',
        );
      }
      if (p.state !== 'preprocessed') {
        throw p.layoutError(
          'preprocessed',
          p.state === 'offloaded' ? 'call wake() first.' : 'load every checkpoint tensor into the reload session before finish().',
        );
      }
      const missing = p.spec.parts.filter((k) => !p.filled.has(k));
      if (missing.length) {
        const names = missing.slice(0, 4).map((k) => hfNamesOfPart(p, k));
        throw new WeightLayoutError(
          `Runtime parameter ${p.name} is only partly loaded: missing ${names.join(', ')}${missing.length > 4 ? ` and ${missing.length - 4} more` : ''}. HINT: a full reload must pass every checkpoint tensor to the reload session (load, loadRange or loadLocalRange) before finish(); load the missing ones and finish() again, or abort().`,
          { parameter: p.name, expected: 'preprocessed (complete)', actual: 'preprocessed (partial)', missing: names },
        );
      }
    }
    // The swap is out of place; one spare buffer per distinct size rotates through the
    // parameters (a swapped parameter's old buffer becomes the spare the next one of its
    // size is written into, in stream order), so processing needs one extra buffer per
    // size (one layer's w13 and w2) instead of a second copy of every expert weight.
    const spare = new Map<string, Tensor>();
    try {
      for (const p of this.params.values()) {
        if (p.spec.swapOnProcess) {
          const [E, A, B] = p.spec.preShape as [number, number, number];
          const n = E * A * B;
          const key = `${p.spec.dtype}:${n}`;
          const out = spare.get(key) ?? Tensor.empty(this.device, p.spec.preShape, p.spec.dtype);
          spare.delete(key);
          stridedRead(out.reshape([n]), p.tensor!.reshape([n]), [E, B, A], [A * B, 1, B], 0, stream);
          spare.set(key, p.tensor!);
          p.tensor = out.reshape(p.spec.preShape);
        }
        p.state = 'processed';
      }
    } finally {
      for (const t of spare.values()) t.release(); // freed once the enqueued reads of it are done
    }
  }

  /** sha256 (first 16 hex digits) of each parameter's local bytes in its current layout; null when dropped. */
  async checksums(stream: Stream, timeoutMs?: number): Promise<Map<string, { layout: LayoutState; shape: number[]; checksum: string | null }>> {
    const out = new Map<string, { layout: LayoutState; shape: number[]; checksum: string | null }>();
    for (const p of this.params.values()) {
      const layout = p.state === 'offloaded' ? p.stateBeforeSleep! : p.state;
      const shape = layout === 'processed' ? p.spec.procShape : p.spec.preShape;
      let bytes: Uint8Array | null = null;
      if (p.state === 'offloaded') bytes = p.host;
      else if (p.state !== 'dropped' && p.tensor) bytes = await p.tensor.toBytes({ stream, timeoutMs });
      out.set(p.name, { layout, shape, checksum: bytes ? runtimeChecksum(bytes) : null });
    }
    return out;
  }
}

/** The checksum `checksums()` reports, for comparing against bytes computed elsewhere (the trainer side of a sync). */
export function runtimeChecksum(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex').slice(0, 16);
}

/** Checks a tensor's shape against `want` with a message naming the parameter and layout. */
export function checkWriteShape(p: RuntimeParam, shape: readonly number[], layout: WriteLayout): void {
  const want = p.shapeOf(layout);
  if (shape.length !== want.length || shape.some((d, i) => d !== want[i])) {
    throw new InvalidArgumentError(
      `DirectSession.write(${p.name}): a '${layout}' tensor must have shape ${fmt(want)} on this TP rank but received ${fmt(shape)}.`,
      { parameter: p.name, layout, expected: want, actual: [...shape] },
    );
  }
}
