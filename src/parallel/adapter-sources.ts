/**
 * The adapter half of the weight-source contract: what a LoRA strategy publishes so an
 * adapter-only weight sync (colocated or server) reads its adapters without knowing the
 * strategy. Per adapted HF weight, the PEFT names of its A and B; the scaling; whether the
 * adapters are merged into the base weights (then an adapter sync would apply them twice);
 * and gather(), collective over the strategy's ranks, which returns every adapter tensor
 * whole by PEFT name (adapters are small next to the model, so they travel whole).
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import type { LoraAdapters } from '../model/lora.js';
import type { HostParam } from '../model/param-store.js';

export interface AdapterTarget {
  /** The adapted HF weight. */
  base: string;
  /** PEFT names of its adapters: A [r, in], B [out, r]. */
  a: string;
  b: string;
}

export interface AdapterSources {
  /** The strategy's layout name, for messages. */
  layout: string;
  scaling: number;
  merged: boolean;
  targets: AdapterTarget[];
  /** Collective over the strategy's ranks: every adapter tensor whole, by PEFT name, on every rank. */
  gather(): Promise<Map<string, HostParam>>;
}

/** A strategy's adapters in the contract (`gather`: its collective that gathers them whole). */
export function adapterSourcesOf(layout: string, adapters: LoraAdapters, gather: () => Promise<Map<string, HostParam>>): AdapterSources {
  return {
    layout,
    scaling: adapters.scaling,
    get merged() {
      return adapters.merged;
    },
    targets: adapters.targets.map((t) => ({ base: t.base, a: t.a, b: t.b })),
    gather: async () => {
      const host = await gather();
      for (const t of adapters.targets) {
        for (const name of [t.a, t.b]) {
          if (!host.has(name)) {
            throw new InvalidArgumentError(
              `Adapter sources (${layout}): the gathered adapters have no ${name}. HINT: every rank must hold the same LoRA config.`,
              {
                tensor: name,
              },
            );
          }
        }
      }
      return host;
    },
  };
}
