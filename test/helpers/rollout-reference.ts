/**
 * The trainer's model as the reference for the rollout engine tests: Qwen3Model on one
 * device with the same HF parameters (fused experts), one sequence at a time, no KV
 * cache. Logits, token log-probs (K.tokenLogprobs) and a greedy decode that re-runs the
 * full forward every step (host argmax, ties to the lower id like K.sample).
 */
import { Device } from '../../src/runtime/device/device.js';
import { Tensor } from '../../src/runtime/device/tensor.js';
import { loadModelConfig, type ModelConfig } from '../../src/model/config.js';
import { Tape } from '../../src/model/autograd.js';
import { ParamStore, type HostParam } from '../../src/model/param-store.js';
import { Qwen3Model, uploadBatch } from '../../src/model/qwen3.js';
import { initialParams } from '../../src/model/params.js';
import { makeProblem, EOS } from '../../src/data/synthetic-task.js';
import * as K from '../../src/model/kernels/index.js';
import { runtimeChecksum } from '../../src/rollout/index.js';

export const cfgOf = (which: 'dense' | 'moe'): ModelConfig =>
  loadModelConfig(new URL(`../../examples/models/tiny-${which}/config.json`, import.meta.url).pathname);

/** Prompts of different lengths from the synthetic task. */
export function prompts(n: number, seed = 5): number[][] {
  return Array.from({ length: n }, (_, i) => makeProblem(seed, i).prompt);
}

export class Reference {
  readonly store: ParamStore;
  readonly model: Qwen3Model;
  readonly device = Device.get(0);
  readonly stream = this.device.defaultStream;

  constructor(
    readonly cfg: ModelConfig,
    readonly host: Map<string, HostParam>,
  ) {
    this.store = ParamStore.fromHost(cfg, this.device, host, this.stream);
    this.model = new Qwen3Model(cfg, this.store);
  }

  static create(cfg: ModelConfig, seed: number): Reference {
    return new Reference(cfg, initialParams(cfg, seed));
  }

  /** Logits [len · V] of one sequence. */
  async logits(seq: number[]): Promise<Float32Array> {
    const tape = new Tape({ stream: this.stream });
    try {
      const b = uploadBatch(Int32Array.from(seq), 1, seq.length, this.device, this.stream);
      tape.own(b.ids);
      tape.own(b.positions);
      const y = this.model.forward(tape, b);
      return (await y.value.toArray({ stream: this.stream })) as Float32Array;
    } finally {
      tape.release();
    }
  }

  /** log softmax(logits / temperature)[seq[t + 1]], t < len - 1. */
  async logprobs(seq: number[], temperature: number): Promise<number[]> {
    const logits = await this.logits(seq);
    const V = this.cfg.vocabSize;
    const l = Tensor.fromArray(this.device, logits, [seq.length, V], { stream: this.stream });
    const tgt = Tensor.fromArray(this.device, Int32Array.from(seq.map((_, t) => (t + 1 < seq.length ? seq[t + 1]! : -100))), [seq.length], {
      stream: this.stream,
    });
    const lp = K.tokenLogprobs(l, tgt, { stream: this.stream, temperature });
    const out = Array.from((await lp.toArray({ stream: this.stream })) as Float32Array).slice(0, seq.length - 1);
    for (const t of [l, tgt, lp]) t.release();
    return out;
  }

  /** Greedy continuation re-running the full forward each step; stops after EOS. */
  async greedy(prompt: number[], maxTokens: number): Promise<number[]> {
    const seq = [...prompt];
    const out: number[] = [];
    const V = this.cfg.vocabSize;
    for (let s = 0; s < maxTokens; s++) {
      const logits = await this.logits(seq);
      const row = logits.subarray((seq.length - 1) * V, seq.length * V);
      let best = 0;
      for (let v = 1; v < V; v++) if (row[v]! > row[best]!) best = v;
      out.push(best);
      seq.push(best);
      if (best === EOS) break;
    }
    return out;
  }

  release(): void {
    this.store.release();
  }
}

/** max |a - b| / max |b| (relative to the reference's scale). */
export function maxRelErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) return Infinity;
  let num = 0,
    den = 0;
  for (let i = 0; i < a.length; i++) {
    num = Math.max(num, Math.abs(a[i]! - b[i]!));
    den = Math.max(den, Math.abs(b[i]!));
  }
  return num / den;
}

/**
 * The runtime tensors tp rank `r` of `tp` should hold after processing, packed on the host
 * element by element from the HF parameters (fused experts) — independent of the loader.
 */
export function expectedRuntime(cfg: ModelConfig, host: Map<string, HostParam>, tp: number, r: number): Map<string, Float32Array> {
  const { hiddenSize: H, headDim: D, numHeads: nH, numKvHeads: nKV } = cfg;
  const out = new Map<string, Float32Array>();
  const get = (n: string) => host.get(n)!.data;
  // rows [from, from+count) of a [rows, cols] matrix
  const rowsOf = (a: Float32Array, cols: number, from: number, count: number) => a.slice(from * cols, (from + count) * cols);
  // cols [from, from+count) of a [rows, cols] matrix
  const colsOf = (a: Float32Array, rows: number, cols: number, from: number, count: number) => {
    const o = new Float32Array(rows * count);
    for (let i = 0; i < rows; i++) for (let j = 0; j < count; j++) o[i * count + j] = a[i * cols + from + j]!;
    return o;
  };
  const cat = (...xs: Float32Array[]) => {
    const o = new Float32Array(xs.reduce((s, x) => s + x.length, 0));
    let k = 0;
    for (const x of xs) {
      o.set(x, k);
      k += x.length;
    }
    return o;
  };
  const hl = nH / tp,
    kvl = tp <= nKV ? nKV / tp : 1;
  const kv0 = tp <= nKV ? r * kvl : Math.floor((r * nKV) / tp);
  for (const [name, p] of host) {
    if (!name.includes('_proj') && !name.includes('experts')) out.set(name, p.data);
  }
  for (let i = 0; i < cfg.numLayers; i++) {
    const pre = `model.layers.${i}`;
    out.set(
      `${pre}.self_attn.qkv_proj.weight`,
      cat(
        rowsOf(get(`${pre}.self_attn.q_proj.weight`), H, r * hl * D, hl * D),
        rowsOf(get(`${pre}.self_attn.k_proj.weight`), H, kv0 * D, kvl * D),
        rowsOf(get(`${pre}.self_attn.v_proj.weight`), H, kv0 * D, kvl * D),
      ),
    );
    out.set(`${pre}.self_attn.o_proj.weight`, colsOf(get(`${pre}.self_attn.o_proj.weight`), H, nH * D, r * hl * D, hl * D));
    if (cfg.moe) {
      const { numExperts: E, intermediateSize: I } = cfg.moe;
      const Il = I / tp;
      const gu = get(`${pre}.mlp.experts.gate_up_proj`),
        dn = get(`${pre}.mlp.experts.down_proj`);
      const w13 = new Float32Array(E * H * 2 * Il),
        w2 = new Float32Array(E * Il * H);
      for (let e = 0; e < E; e++) {
        for (let h = 0; h < H; h++) {
          for (let j = 0; j < Il; j++) {
            w13[(e * H + h) * 2 * Il + j] = gu[(e * 2 * I + r * Il + j) * H + h]!; // gate
            w13[(e * H + h) * 2 * Il + Il + j] = gu[(e * 2 * I + I + r * Il + j) * H + h]!; // up
            w2[(e * Il + j) * H + h] = dn[(e * H + h) * I + r * Il + j]!;
          }
        }
      }
      out.set(`${pre}.mlp.experts.w13_weight`, w13);
      out.set(`${pre}.mlp.experts.w2_weight`, w2);
    } else {
      const I = cfg.intermediateSize,
        Il = I / tp;
      out.set(
        `${pre}.mlp.gate_up_proj.weight`,
        cat(rowsOf(get(`${pre}.mlp.gate_proj.weight`), H, r * Il, Il), rowsOf(get(`${pre}.mlp.up_proj.weight`), H, r * Il, Il)),
      );
      out.set(`${pre}.mlp.down_proj.weight`, colsOf(get(`${pre}.mlp.down_proj.weight`), H, I, r * Il, Il));
    }
  }
  return out;
}

/** Checksums of `expectedRuntime` (runtimeChecksum of the fp32 bytes). */
export function expectedChecksums(cfg: ModelConfig, host: Map<string, HostParam>, tp: number, r: number): Record<string, string> {
  return Object.fromEntries([...expectedRuntime(cfg, host, tp, r)].map(([n, a]) => [n, runtimeChecksum(new Uint8Array(a.buffer, a.byteOffset, a.byteLength))]));
}
