/**
 * The model's parameters on one device, by HF name, as leaf Vars with fp32
 * gradient buffers and AdamW state. MoE experts are held in the Transformers-5
 * fused layout (gate_up_proj [E, 2I, H], down_proj [E, H, I]).
 */
import { fill, Tensor, type Device, type Stream } from '../runtime/device-index.js';
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
        throw new InvalidArgumentError(`Parameter ${spec.name} has shape [${p.shape.join(', ')}] but the config needs [${spec.shape.join(', ')}].`, { name: spec.name });
      }
      store.vars.set(spec.name, new Var(Tensor.fromArray(device, p.data, spec.shape, { stream }), true, spec.name));
    }
    return store;
  }

  get(name: string): Var {
    const v = this.vars.get(name);
    if (!v) throw new InvalidArgumentError(`No parameter named ${name}.`, { name });
    return v;
  }

  /** Sets every gradient to zero (allocating the buffers on first use). */
  zeroGrad(stream: Stream): void {
    for (const v of this.vars.values()) {
      if (!v.grad) v.grad = Tensor.empty(this.device, v.value.shape, 'fp32');
      fill(v.grad, 0, { stream });
    }
  }

  /** One AdamW step over every parameter with a gradient. */
  adamw(hp: AdamWHyper, stream: Stream, impl: 'fast' | 'reference' = 'fast'): void {
    this.step++;
    for (const [name, v] of this.vars) {
      if (!v.grad) continue;
      let mv = this.moments.get(name);
      if (!mv) {
        mv = { m: Tensor.zeros(this.device, v.value.shape, 'fp32', { stream }), v: Tensor.zeros(this.device, v.value.shape, 'fp32', { stream }) };
        this.moments.set(name, mv);
      }
      K.adamw(v.value, v.grad, mv.m, mv.v, { ...hp, step: this.step, stream, impl });
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
