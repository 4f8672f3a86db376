/**
 * Named loss builders for the trainer actor. A layer above train (e.g. src/grpo)
 * registers its loss when it is imported; the trainer actor looks losses up by
 * name, so it never imports the layer that defines them.
 *
 *   registerLoss('grpo', (data, opts) => grpoLoss(data, opts));
 *   const loss = lossByName('grpo')(data, opts);
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import type { LossFn } from './strategy.js';

/** Builds one step's LossFn from the step's per-batch data and options (both plain, cloneable values). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- each loss module defines its own data and option shapes
export type LossBuilder = (data: any, opts: any) => LossFn;

const builders = new Map<string, LossBuilder>();

/** Registers `build` under `name`; registering the same builder again is a no-op, a different one under a taken name throws. */
export function registerLoss(name: string, build: LossBuilder): void {
  if (typeof name !== 'string' || name.length === 0) throw new InvalidArgumentError('registerLoss(name, build): name must be a non-empty string.');
  if (typeof build !== 'function') throw new InvalidArgumentError(`registerLoss('${name}', build): build must be a function (data, opts) => LossFn.`);
  const have = builders.get(name);
  if (have && have !== build) {
    throw new InvalidArgumentError(`A different loss is already registered as '${name}'. HINT: pick another name for your loss.`);
  }
  builders.set(name, build);
}

/** Names of the losses registered in this thread, sorted. */
export function registeredLosses(): string[] {
  return [...builders.keys()].sort();
}

/** The builder registered as `name`; throws a clear error naming the registered ones when there is none. */
export function lossByName(name: string): LossBuilder {
  const b = builders.get(name);
  if (b) return b;
  const known = registeredLosses();
  throw new InvalidArgumentError(
    `No loss is registered as '${name}' on this rank (registered: ${known.length ? known.join(', ') : 'none'}). ` +
      `HINT: import the module that registers it in the rank's entry or actor module (the GRPO loss registers itself as 'grpo' when 'ascent' or src/grpo is imported), or call registerLoss('${name}', build) first.`,
  );
}
