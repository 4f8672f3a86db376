/**
 * The trainer's precision (`dtype` trainer option, `trainer.dtype` in a GRPO config): 'float32'
 * (default) computes in fp32; 'bfloat16' is mixed precision as PyTorch FSDP2's
 * MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): the parameters a strategy owns stay
 * fp32 (they are the master weights: AdamW, its moments, checkpoints and weight sync read them),
 * and the forward / backward see a bf16 compute copy of the matmul weights. Gradients are fp32
 * (the matmuls accumulate in fp32) and reduce-scatter in fp32.
 *
 * bf16 (matmul weights, the split the rollout engine's bf16 weights use): attention and GDN
 * projections, the dense MLP and the shared expert's projections, the fused experts, the
 * embedding table and the LM head. fp32: the norms, the MoE router and the shared expert's gate
 * (rounding their logits flips near-tied choices), the GDN conv1d, A_log and dt_bias (state
 * recurrences). The param kinds of paramSpecs say which is which, so a new family is covered
 * when its specs are.
 */
import { cast, fill, Tensor, type Device, type Stream } from '../runtime/device/device-index.js';
import { checkPrecision, PRECISIONS, type Precision } from '../runtime/device/dtype.js';
import { Var } from '../model/autograd.js';
import type { ModelConfig } from '../model/config.js';
import { paramSpecs } from '../model/params.js';

export const TRAINER_DTYPES = PRECISIONS;
export type TrainerDtype = Precision;

/** Checks a trainer dtype option (`what` names it in the message); undefined is 'float32'. */
export function checkTrainerDtype(value: unknown, what = 'dtype'): TrainerDtype {
  return checkPrecision(
    value,
    what,
    "'bfloat16' trains with bf16 matmul weights and activations over fp32 master weights and AdamW moments; 'float32' (the default) computes in fp32.",
  );
}

/** The shared expert's gate is a [1, H] 'linear' that gates like a router: it stays fp32. */
const FP32_LINEAR = /\.shared_expert_gate\.weight$/;

const cache = new WeakMap<ModelConfig, Set<string>>();

/** The HF names (fused experts) of `cfg`'s matmul weights: the ones a bf16 trainer computes with in bf16. */
export function bf16ComputeNames(cfg: ModelConfig): ReadonlySet<string> {
  let s = cache.get(cfg);
  if (!s) {
    const kinds = new Set(['linear', 'embedding', 'experts']);
    s = new Set(paramSpecs(cfg, { expertLayout: 'fused' }).flatMap((p) => (kinds.has(p.kind) && !FP32_LINEAR.test(p.name) ? [p.name] : [])));
    cache.set(cfg, s);
  }
  return s;
}

/**
 * The single-device strategy's bf16 compute copies: one bf16 tensor per matmul weight, cast
 * from the fp32 master once per optimizer step (refresh() when `stale`), handed to the forward
 * as a Var whose gradient IS the master's fp32 gradient buffer, so the tape accumulates the
 * fp32 gradients where AdamW reads them.
 */
export class ComputeCopies {
  private readonly copies = new Map<string, Var>();
  /** Set after an optimizer step or a state load: the copies lag the masters. */
  stale = true;

  constructor(
    private readonly device: Device,
    private readonly masters: (name: string) => Var,
    readonly names: ReadonlySet<string>,
  ) {}

  /** Re-casts every copy from its master (stream-ordered; the previous copies are released after their readers ran). */
  refresh(stream: Stream): void {
    for (const name of this.names) {
      const m = this.masters(name);
      const old = this.copies.get(name);
      const v = cast(m.value, 'bf16', { stream });
      if (old) {
        old.value.release();
        old.value = v;
      } else this.copies.set(name, new Var(v, m.requiresGrad, name));
    }
    this.stale = false;
  }

  /** The Var the forward uses for parameter `name`: the bf16 copy for a matmul weight, else the master itself. */
  param(name: string, stream: Stream): Var {
    const m = this.masters(name);
    const c = this.copies.get(name);
    if (!c) return m;
    c.requiresGrad = m.requiresGrad;
    if (m.requiresGrad && !m.grad) {
      // As the tape would for the master: a zeroed fp32 buffer on first use.
      m.grad = Tensor.empty(this.device, m.value.shape, 'fp32');
      fill(m.grad, 0, { stream });
    }
    c.grad = m.grad;
    return c;
  }

  /** The bf16 copy of `name` (undefined for an fp32 parameter): for tests. */
  copyOf(name: string): Tensor | undefined {
    return this.copies.get(name)?.value;
  }

  release(): void {
    for (const c of this.copies.values()) if (!c.value.released) c.value.release();
    this.copies.clear();
  }
}
