/**
 * The parallel sizes of a Megatron strategy (tp, dp, ep) checked against the world
 * size and the model config, with errors naming the sizes and what to use instead,
 * and the layout string ('tp2', 'tp2dp2', 'ep2', 'dp4', ...). Pure: no communication,
 * so every rank fails the same way before any collective.
 */
import { InvalidArgumentError } from '../../runtime/errors.js';
import { isMoeLayer, type ModelConfig } from '../../model/config.js';

export interface ParallelSizes {
  tp: number;
  dp: number;
  ep: number;
}

const divisors = (n: number) => Array.from({ length: n }, (_, i) => i + 1).filter((d) => n % d === 0);
const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));

function posInt(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) {
    throw new InvalidArgumentError(`MegatronStrategy: expected a positive integer for ${what} but received ${JSON.stringify(v)}.`, { argument: what });
  }
  return v;
}

/** Checks tp / dp / ep (dp defaults to worldSize / tp, ep to 1) for `worldSize` ranks and `cfg`. */
export function checkParallelSizes(cfg: ModelConfig, worldSize: number, opts: { tp?: number; dp?: number; ep?: number }): ParallelSizes {
  const tp = posInt(opts.tp ?? 1, 'tp');
  const ep = posInt(opts.ep ?? 1, 'ep');
  if (opts.dp === undefined && worldSize % tp !== 0) {
    throw new InvalidArgumentError(
      `MegatronStrategy: tp=${tp} does not divide the world size ${worldSize}. HINT: use tp in [${divisors(worldSize).join(', ')}] or launch a multiple of ${tp} ranks.`,
      { tp, worldSize },
    );
  }
  const dp = posInt(opts.dp ?? worldSize / tp, 'dp');
  if (tp * dp !== worldSize) {
    throw new InvalidArgumentError(
      `MegatronStrategy: world size ${worldSize} != tp (${tp}) x dp (${dp}) = ${tp * dp}. HINT: launch --nproc ${tp * dp}, or use dp = ${worldSize % tp === 0 ? worldSize / tp : '(world size / tp)'} for tp=${tp}.`,
      { worldSize, tp, dp },
    );
  }
  const denseLayers = Array.from({ length: cfg.numLayers }, (_, i) => i).filter((i) => !isMoeLayer(cfg, i));
  const limits: Array<[string, number]> = [
    ['num_attention_heads', cfg.numHeads],
    ['num_key_value_heads', cfg.numKvHeads],
  ];
  if (denseLayers.length) limits.push(['intermediate_size', cfg.intermediateSize]);
  // Qwen3.5-MoE's shared expert splits over tp as a dense MLP.
  if (cfg.moe?.sharedExpertIntermediateSize) limits.push(['shared_expert_intermediate_size', cfg.moe.sharedExpertIntermediateSize]);
  const ok = divisors(limits.reduce((g, [, n]) => gcd(g, n), 0));
  for (const [field, n] of limits) {
    if (n % tp !== 0) {
      throw new InvalidArgumentError(`MegatronStrategy: tp=${tp} does not divide ${field}=${n}. HINT: use tp in [${ok.join(', ')}] for this model.`, {
        tp,
        field,
        size: n,
      });
    }
  }
  if (ep > 1 && !cfg.moe) {
    throw new InvalidArgumentError(`MegatronStrategy: ep=${ep} needs a MoE model but ${cfg.modelType} has no experts. HINT: use ep=1.`, { ep });
  }
  if (cfg.moe && cfg.moe.numExperts % ep !== 0) {
    throw new InvalidArgumentError(
      `MegatronStrategy: ep=${ep} does not divide num_experts=${cfg.moe.numExperts}. HINT: use ep in [${divisors(gcd(cfg.moe.numExperts, dp)).join(', ')}].`,
      { ep, numExperts: cfg.moe.numExperts },
    );
  }
  if (dp % ep !== 0) {
    throw new InvalidArgumentError(
      `MegatronStrategy: ep=${ep} does not divide dp=${dp} (experts are sharded over data-parallel ranks). HINT: use ep in [${divisors(cfg.moe ? gcd(cfg.moe.numExperts, dp) : 1).join(', ')}], or more data-parallel ranks.`,
      { ep, dp },
    );
  }
  return { tp, dp, ep };
}

/** 'tp2', 'tp2dp2', 'ep2' (dp = ep), 'dp4ep2', 'tp2ep2', 'dp4'; 'tp1' for one rank. */
export function layoutName({ tp, dp, ep }: ParallelSizes): string {
  const s = `${tp > 1 ? `tp${tp}` : ''}${dp > ep ? `dp${dp}` : ''}${ep > 1 ? `ep${ep}` : ''}`;
  return s || 'tp1';
}
