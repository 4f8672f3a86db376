/**
 * The model's parameters on one device, by HF name, as leaf Vars with fp32
 * gradient buffers and AdamW state. MoE experts are held in the Transformers-5
 * fused layout (gate_up_proj [E, 2I, H], down_proj [E, H, I]).
 */
import { copy, fill, Tensor, type Device, type Stream } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import { Var } from './autograd.js';
import type { ModelConfig } from './config.js';
import * as K from './kernels/index.js';
import { paramSpecs } from './params.js';

export interface HostParam {
  shape: readonly number[];
  data: Float32Array;
}

export interface AdamWHyper {
  lr: number;
  beta1?: number;
  beta2?: number;
  eps?: number;
  weightDecay?: number;
}

export class ParamStore {
  readonly vars = new Map<string, Var>();
  private readonly moments = new Map<string, { m: Tensor; v: Tensor }>();
  private step = 0;

  private constructor(
    readonly cfg: ModelConfig,
    readonly device: Device,
  ) {}

  /** Uploads host parameters (HF names, fused expert layout) and checks they are exactly the model's. */
  static fromHost(cfg: ModelConfig, device: Device, host: ReadonlyMap<string, HostParam>, stream: Stream): ParamStore {
    const store = new ParamStore(cfg, device);
    const specs = paramSpecs(cfg, { expertLayout: 'fused' });
    const missing = specs.filter((s) => !host.has(s.name)).map((s) => s.name);
    const expected = new Set(specs.map((s) => s.name));
    const extra = [...host.keys()].filter((n) => !expected.has(n));
    if (missing.length || extra.length) {
      throw new InvalidArgumentError(
        `Parameters do not match the ${cfg.modelType} config: missing [${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ', …' : ''}], unexpected [${extra.slice(0, 5).join(', ')}${extra.length > 5 ? ', …' : ''}]. HINT: experts must be in the fused layout (convertExpertLayout(..., 'fused')).`,
        { missing, extra },
      );
    }
    for (const spec of specs) {
      const p = host.get(spec.name)!;
      if (p.shape.length !== spec.shape.length || p.shape.some((d, i) => d !== spec.shape[i])) {
        throw new InvalidArgumentError(`Parameter ${spec.name} has shape [${p.shape.join(', ')}] but the config needs [${spec.shape.join(', ')}].`, {
          name: spec.name,
        });
      }
      store.vars.set(spec.name, new Var(Tensor.fromArray(device, p.data, spec.shape, { stream }), true, spec.name));
    }
    return store;
  }

  /**
   * Adds parameters that are not the model's own (LoRA adapters) from host arrays. Names
   * must be new; they train unless setTrainable() says otherwise.
   */
  addParams(host: ReadonlyMap<string, HostParam>, stream: Stream): void {
    const clash = [...host.keys()].filter((n) => this.vars.has(n));
    if (clash.length) throw new InvalidArgumentError(`addParams(): parameters [${clash.slice(0, 5).join(', ')}] already exist in this store.`, { clash });
    for (const [name, p] of host) {
      const n = p.shape.reduce((a, b) => a * b, 1);
      if (p.data.length !== n)
        throw new InvalidArgumentError(`addParams(): ${name} has ${p.data.length} values but shape [${p.shape.join(', ')}] needs ${n}.`, { name });
    }
    for (const [name, p] of host) {
      const trainable = this.trainable === null || this.trainable.has(name);
      this.vars.set(name, new Var(Tensor.fromArray(this.device, p.data, p.shape, { stream }), trainable, name));
    }
  }

  get(name: string): Var {
    const v = this.vars.get(name);
    if (!v) throw new InvalidArgumentError(`No parameter named ${name}.`, { name });
    return v;
  }

  /** Sets every gradient to zero (allocating the buffers on first use). */
  zeroGrad(stream: Stream): void {
    for (const [name, v] of this.vars) {
      if (this.trainable !== null && !this.trainable.has(name)) continue;
      if (!v.grad) v.grad = Tensor.empty(this.device, v.value.shape, 'fp32');
      fill(v.grad, 0, { stream });
    }
  }

  /** One AdamW step over every parameter with a gradient (one op for all of them). */
  adamw(hp: AdamWHyper, stream: Stream, impl: 'fast' | 'reference' = 'fast'): void {
    this.step++;
    const list: K.AdamWEntry[] = [];
    for (const [name, v] of this.vars) {
      if (!v.grad || (this.trainable !== null && !this.trainable.has(name))) continue;
      let mv = this.moments.get(name);
      if (!mv) {
        mv = { m: Tensor.zeros(this.device, v.value.shape, 'fp32', { stream }), v: Tensor.zeros(this.device, v.value.shape, 'fp32', { stream }) };
        this.moments.set(name, mv);
      }
      list.push({ param: v.value, grad: v.grad, m: mv.m, v: mv.v });
    }
    K.adamwMulti(list, { ...hp, step: this.step, stream, impl });
  }

  /** AdamW steps taken. */
  get stepCount(): number {
    return this.step;
  }

  /** Trainable parameters: all by default; only these get gradients and AdamW updates once set. */
  private trainable: Set<string> | null = null;

  /** Freezes every parameter not in `names` (LoRA: only adapters train). */
  setTrainable(names: Iterable<string> | null): void {
    this.trainable = names === null ? null : new Set(names);
    for (const [name, v] of this.vars) v.requiresGrad = this.trainable === null || this.trainable.has(name);
  }

  /** Parameters, gradients or AdamW moments by name on the host, with shapes. */
  async hostState(kind: 'params' | 'grads' | 'exp_avg' | 'exp_avg_sq', stream: Stream): Promise<Map<string, HostParam>> {
    const out = new Map<string, HostParam>();
    for (const [name, v] of this.vars) {
      const mv = this.moments.get(name);
      const t = kind === 'params' ? v.value : kind === 'grads' ? v.grad : kind === 'exp_avg' ? mv?.m : mv?.v;
      if (t) out.set(name, { shape: [...t.shape], data: (await t.toArray({ stream })) as Float32Array });
    }
    return out;
  }

  /**
   * Overwrites parameters (and AdamW state when given) from host arrays by name; shapes
   * must match. Moments missing from the state stay zero (a parameter never stepped).
   */
  loadHost(
    state: {
      params: ReadonlyMap<string, HostParam>;
      optimizer?: { step: number; expAvg: ReadonlyMap<string, HostParam>; expAvgSq: ReadonlyMap<string, HostParam> };
    },
    stream: Stream,
  ): void {
    const check = (what: string, name: string, p: HostParam | undefined, shape: readonly number[]): HostParam => {
      if (!p) throw new InvalidArgumentError(`Loading state: ${what} for ${name} is missing.`, { name });
      if (p.shape.length !== shape.length || p.shape.some((d, i) => d !== shape[i]) || p.data.length !== v0(shape)) {
        throw new InvalidArgumentError(`Loading state: ${what} ${name} has shape [${p.shape.join(', ')}] but the parameter is [${shape.join(', ')}].`, {
          name,
        });
      }
      return p;
    };
    const v0 = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);
    const extra = [...state.params.keys()].filter((n) => !this.vars.has(n));
    if (extra.length) throw new InvalidArgumentError(`Loading state: unexpected parameters [${extra.slice(0, 5).join(', ')}].`, { extra });
    for (const [name, v] of this.vars) {
      const p = check('parameter', name, state.params.get(name), v.value.shape);
      const t = Tensor.fromArray(this.device, p.data, v.value.shape, { stream });
      copy(v.value, t, { stream });
      t.release();
    }
    if (!state.optimizer) return;
    this.step = state.optimizer.step;
    for (const [name, v] of this.vars) {
      const m = state.optimizer.expAvg.get(name);
      const s = state.optimizer.expAvgSq.get(name);
      if (!m && !s) continue;
      let mv = this.moments.get(name);
      if (!mv) {
        mv = { m: Tensor.zeros(this.device, v.value.shape, 'fp32', { stream }), v: Tensor.zeros(this.device, v.value.shape, 'fp32', { stream }) };
        this.moments.set(name, mv);
      }
      for (const [dst, src, what] of [
        [mv.m, m, 'exp_avg'],
        [mv.v, s, 'exp_avg_sq'],
      ] as const) {
        const h = check(what, name, src, v.value.shape);
        const t = Tensor.fromArray(this.device, h.data, v.value.shape, { stream });
        copy(dst, t, { stream });
        t.release();
      }
    }
  }

  /** Reads every parameter (and, with `grads`, gradient) back to the host. */
  async toHost(stream: Stream, what: 'values' | 'grads' = 'values'): Promise<Map<string, Float32Array>> {
    const out = new Map<string, Float32Array>();
    for (const [name, v] of this.vars) {
      const t = what === 'values' ? v.value : v.grad;
      if (t) out.set(name, (await t.toArray({ stream })) as Float32Array);
    }
    return out;
  }

  release(): void {
    for (const v of this.vars.values()) {
      v.value.release();
      v.grad?.release();
    }
    for (const { m, v } of this.moments.values()) {
      m.release();
      v.release();
    }
  }
}
