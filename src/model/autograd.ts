/**
 * A small reverse-mode autograd tape over device tensors.
 *
 * Forward functions (src/model/functional.ts) run kernels on the tape's stream and
 * record one node per op with a closure computing the input gradients from the
 * output gradients. `backward(loss, seed)` walks the nodes in reverse recording
 * order (a valid topological order, since nodes are recorded as they are
 * computed), sums the gradients reaching each Var, and accumulates them into the
 * persistent `Var.grad` of the leaves that require grad (parameters). Nothing here reads device memory on the
 * host: the whole forward + backward stays on the stream.
 *
 * Memory: the tape owns every tensor it saw created (activations, intermediate
 * gradients); `release()` frees them. Leaf gradients belong to the leaf's owner,
 * which zeroes them between steps.
 */
import { add, axpy, fill, Tensor, type Stream } from '../runtime/device/device-index.js';
import { InvalidArgumentError, InvalidStateError } from '../runtime/errors.js';
import type { KernelImpl } from '../runtime/patches.js';

export class Var {
  grad: Tensor | undefined;
  /**
   * A leaf whose owner collects its gradients itself: backward hands each gradient reaching
   * it (a tensor the tape owns, valid until release()) to `sink` instead of accumulating into
   * `grad`. FSDP2 packs them straight into its reduce-scatter input: no zeroed buffer, no add.
   */
  sink: ((g: Tensor) => void) | undefined;
  /** @internal Set when produced by a tape node. */
  node: Node | undefined;

  constructor(
    /**
     * The Var's tensor. Backward closures read it at backward time, so an owner may
     * swap in a re-materialised tensor of the same shape between forward and backward
     * (FSDP2 frees gathered parameters after forward and re-gathers them for backward).
     */
    public value: Tensor,
    /** Leaves: set by the owner (parameters). Non-leaves: set by the tape when an input requires grad. */
    public requiresGrad = false,
    readonly name = '',
  ) {}

  get shape(): readonly number[] {
    return this.value.shape;
  }
}

/** One MoE block's routing, kept for the router load-balancing loss (model/router-aux-loss.ts). */
export interface RouterTap {
  /** Router logits [T, E] on the tape. */
  logits: Var;
  /** The router kernel's fp32 softmax [T, E]. */
  probs: Tensor;
  /** The router kernel's top-k expert ids [T, k]. */
  indices: Tensor;
}

type Backward = (gradOutputs: ReadonlyArray<Tensor | undefined>) => ReadonlyArray<Tensor | undefined>;

interface Node {
  readonly name: string;
  readonly inputs: readonly Var[];
  readonly outputs: readonly Var[];
  readonly backward: Backward;
}

export interface TapeOptions {
  stream: Stream;
  /** Kernel implementation per patched op (patch registry); default always 'fast'. */
  impl?: (patch: string) => KernelImpl;
}

export class Tape {
  readonly stream: Stream;
  private readonly implFor: (patch: string) => KernelImpl;
  private readonly nodes: Node[] = [];
  private readonly owned = new Set<Tensor>();
  private released = false;
  /**
   * Set (to []) by a strategy whose model config asks for the router load-balancing loss:
   * every MoE block of the forward then appends its routing here. Undefined: nothing is kept.
   */
  routerTaps: RouterTap[] | undefined;

  constructor(opts: TapeOptions) {
    this.stream = opts.stream;
    this.implFor = opts.impl ?? (() => 'fast');
  }

  /** The implementation an op under patch `name` runs with. */
  impl(patch: string): KernelImpl {
    return this.implFor(patch);
  }

  /** Registers a tensor made during forward or backward, to be freed by `release()`. */
  own<T extends Tensor>(t: T): T {
    this.owned.add(t);
    return t;
  }

  /** A Var over a tensor this tape made (so the tape frees it). */
  result(t: Tensor, name = ''): Var {
    return new Var(this.own(t), false, name);
  }

  /**
   * Records an op: `outputs` were computed from `inputs`; `backward` maps output
   * gradients (undefined where no gradient flows) to input gradients. Outputs
   * require grad iff some input does; ops with no such input record nothing.
   */
  record(name: string, inputs: readonly Var[], outputs: readonly Var[], backward: Backward): void {
    this.checkLive();
    if (!inputs.some((v) => v.requiresGrad)) return;
    const node: Node = { name, inputs, outputs, backward };
    for (const o of outputs) {
      o.requiresGrad = true;
      o.node = node;
    }
    this.nodes.push(node);
  }

  /**
   * Back-propagates from `loss` seeded with `seed` (same shape as loss.value), plus the
   * `more` roots with their seeds (e.g. the router aux loss; a root that needs no gradient
   * is skipped). Leaf gradients accumulate into existing `grad` tensors (call zeroGrad between steps).
   */
  backward(loss: Var, seed: Tensor, more: ReadonlyArray<readonly [Var, Tensor]> = []): void {
    this.checkLive();
    if (!loss.requiresGrad) throw new InvalidArgumentError('backward(): the loss does not depend on any Var that requires grad.');
    if (seed.numel !== loss.value.numel) {
      throw new InvalidArgumentError(`backward(): the seed has ${seed.numel} elements but the loss has ${loss.value.numel}.`);
    }
    // Gradients of non-leaf Vars live here until their node consumed them.
    const grads = new Map<Var, Tensor>([[loss, seed]]);
    for (const [root, s] of more) {
      if (s.numel !== root.value.numel)
        throw new InvalidArgumentError(`backward(): a root's seed has ${s.numel} elements but the root has ${root.value.numel}.`);
      if (root.requiresGrad && root !== loss) grads.set(root, s);
    }
    for (let i = this.nodes.length - 1; i >= 0; i--) {
      const node = this.nodes[i]!;
      // Built by push, not outputs.map(): map() inlined into optimised code returns a HOLEY array
      // where the builtin returns a PACKED one, so once this loop was optimised, every backward
      // closure destructuring its gradients (and gOut's own checks here) met a new map and was
      // deoptimised, then optimised again many steps later.
      const gOut: Array<Tensor | undefined> = [];
      let anyGrad = false;
      for (const o of node.outputs) {
        const g = grads.get(o);
        if (g !== undefined) anyGrad = true;
        gOut.push(g);
      }
      if (!anyGrad) continue;
      for (const o of node.outputs) grads.delete(o);
      const gIn = node.backward(gOut);
      node.inputs.forEach((input, j) => {
        const g = gIn[j];
        if (g === undefined || !input.requiresGrad) return;
        if (input.node === undefined) {
          if (input.sink) {
            input.sink(g);
            return;
          }
          // A leaf (parameter): it owns a persistent fp32 grad buffer, accumulated in place.
          if (input.grad === undefined) {
            input.grad = Tensor.empty(input.value.device, input.value.shape, 'fp32');
            fill(input.grad, 0, { stream: this.stream });
          }
          axpy(input.grad, 1, g, { stream: this.stream });
          return;
        }
        // Never accumulate in place here: one gradient tensor may be handed to several
        // inputs (add's backward passes dY to both), so a sum is a new tensor.
        const prev = grads.get(input);
        grads.set(input, prev === undefined ? g : this.own(add(prev, g, { stream: this.stream })));
      });
    }
  }

  /** Frees every tensor the tape owns (activations and intermediate gradients). */
  release(): void {
    if (this.released) return;
    this.released = true;
    for (const t of this.owned) if (!t.released) t.release();
    this.owned.clear();
    this.nodes.length = 0;
  }

  get nodeCount(): number {
    return this.nodes.length;
  }

  private checkLive(): void {
    if (this.released) throw new InvalidStateError('This tape was released. HINT: record a new step on a new Tape.');
  }
}
