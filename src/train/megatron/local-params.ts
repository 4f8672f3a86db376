/**
 * One rank's Megatron parameters, already sliced: every dense tensor at its tensor-parallel
 * local shape (the piece tpSlice() would cut) and each MoE layer's local experts stacked
 * under expertUnitName() ([El, 2I, H] and [El, H, I]). loadMegatronShards() builds it from a
 * checkpoint; MegatronStrategy.create() takes it in place of full HF parameters.
 */
import { InvalidArgumentError } from '../../runtime/errors.js';
import type { HostParam } from '../../model/param-store.js';

export class MegatronLocalParams {
  constructor(private readonly tensors: ReadonlyMap<string, HostParam>) {}

  /** The local tensor `name`, which must have `shape` (the loader built it so; anything else is a bug). */
  get(name: string, shape: readonly number[]): HostParam {
    const t = this.tensors.get(name);
    const n = shape.reduce((a, b) => a * b, 1);
    if (!t || t.shape.length !== shape.length || t.shape.some((d, k) => d !== shape[k]) || t.data.length !== n) {
      throw new InvalidArgumentError(
        `MegatronLocalParams: ${t ? `${name} has shape [${t.shape.join(', ')}] but this rank needs [${shape.join(', ')}]` : `no local tensor ${name}`}. HINT: build it with loadMegatronShards() for the same config and parallel sizes.`,
        { name },
      );
    }
    return t;
  }
}
