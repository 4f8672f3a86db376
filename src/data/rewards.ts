/**
 * Runs weighted reward functions (user modules or built-ins) in the Piscina
 * TaskPool, each call under a deadline. Results are validated (one finite number
 * or null per sample) and combined as TRL does: a NaN-aware weighted sum, where
 * null rewards are skipped and a sample whose rewards are all null gets 0 (as
 * torch.nansum); such samples are counted in `allNullSamples`.
 */
import { basename } from 'node:path';
import { AscentError, ConfigError, TimeoutError } from '../runtime/errors.js';
import { builtFile } from '../runtime/paths.js';
import type { TaskPool } from '../runtime/actor-system/task-pool.js';
import { RewardsConfigSchema, parseConfig, type RewardSpec, type RewardsConfig } from './config.js';
import type { RewardInput, RewardValues } from './reward-types.js';

/** A reward function threw, or returned something other than one finite number or null per sample. */
export class RewardError extends AscentError {
  override readonly code = 'ASCENT_REWARD';
}

export interface RewardStat {
  /** Mean and sample std (n - 1) over the non-null values; NaN when there are none (std: fewer than 2). */
  mean: number;
  std: number;
  /** Non-null values. */
  count: number;
}

export interface RewardResult {
  /** Weighted sum per sample. */
  total: number[];
  /** Each reward's raw (unweighted) values, by name. */
  perReward: Record<string, RewardValues>;
  /** Per-reward mean / std, by name, for the logs. */
  summary: Record<string, RewardStat>;
  allNullSamples: number;
}

interface Resolved {
  name: string;
  /** `module:export`, for messages. */
  label: string;
  module: string | URL;
  exportName: string;
  weight: number;
  options?: Record<string, unknown>;
}

function resolveSpec(spec: RewardSpec): Resolved {
  if ('builtin' in spec) {
    const { builtin, weight, name, ...options } = spec;
    if (builtin === 'format' && options.pattern === undefined)
      throw new ConfigError("The built-in reward 'format' needs `pattern` (a regex string). HINT: e.g. { builtin: 'format', pattern: '<think>.*</think>.*' }.");
    if (builtin === 'overlong' && (options.maxCompletionLength === undefined || options.cacheLength === undefined)) {
      throw new ConfigError(
        "The built-in reward 'overlong' needs `maxCompletionLength` and `cacheLength`. HINT: e.g. { builtin: 'overlong', maxCompletionLength: 1024, cacheLength: 256 }.",
      );
    }
    return { name: name ?? builtin, label: `builtin:${builtin}`, module: builtFile('data/builtin-rewards.js'), exportName: builtin, weight, options };
  }
  return {
    name: spec.name ?? `${basename(spec.module)}:${spec.export}`,
    label: `${spec.module}:${spec.export}`,
    module: spec.module,
    exportName: spec.export,
    weight: spec.weight,
  };
}

function stat(values: RewardValues): RewardStat {
  const xs = values.filter((v): v is number => v !== null);
  const n = xs.length;
  if (n === 0) return { mean: NaN, std: NaN, count: 0 };
  const mean = xs.reduce((a, b) => a + b, 0) / n;
  const std = n < 2 ? NaN : Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / (n - 1));
  return { mean, std, count: n };
}

export class RewardRunner {
  readonly config: RewardsConfig;
  private readonly specs: Resolved[];

  constructor(
    private readonly pool: TaskPool,
    config: unknown,
  ) {
    this.config = parseConfig(RewardsConfigSchema, config, 'rewards');
    this.specs = this.config.rewards.map(resolveSpec);
    const seen = new Set<string>();
    for (const s of this.specs) {
      if (seen.has(s.name)) throw new ConfigError(`Two rewards are named ${JSON.stringify(s.name)}. HINT: give each a distinct \`name\`.`);
      seen.add(s.name);
    }
  }

  get names(): string[] {
    return this.specs.map((s) => s.name);
  }

  async score(input: RewardInput): Promise<RewardResult> {
    const n = input.completions.length;
    for (const [k, v] of Object.entries({
      prompts: input.prompts,
      promptIds: input.promptIds,
      completionIds: input.completionIds,
      finishReasons: input.finishReasons,
      columns: input.columns,
    })) {
      if (!Array.isArray(v) || v.length !== n) {
        throw new ConfigError(
          `Reward input ${k} has ${Array.isArray(v) ? v.length : 'no'} entries but there are ${n} completions. HINT: pass one entry per sample.`,
        );
      }
    }
    const results = await Promise.all(this.specs.map((s) => this.runOne(s, input, n)));
    const perReward: Record<string, RewardValues> = {};
    const summary: Record<string, RewardStat> = {};
    const total = new Array<number>(n).fill(0);
    const anyValue = new Array<boolean>(n).fill(false);
    this.specs.forEach((s, k) => {
      const vals = results[k]!;
      perReward[s.name] = vals;
      summary[s.name] = stat(vals);
      vals.forEach((v, i) => {
        if (v === null) return;
        total[i]! += s.weight * v;
        anyValue[i] = true;
      });
    });
    return { total, perReward, summary, allNullSamples: anyValue.filter((x) => !x).length };
  }

  private async runOne(s: Resolved, input: RewardInput, n: number): Promise<RewardValues> {
    const ac = new AbortController();
    const timeoutMs = this.config.timeoutMs;
    const timer = setTimeout(() => ac.abort(), timeoutMs);
    let out: unknown;
    try {
      out = await this.pool.run({ module: s.module, export: s.exportName }, s.options ? { ...input, options: s.options } : input, { signal: ac.signal });
    } catch (err) {
      if (ac.signal.aborted) {
        throw new TimeoutError(
          `Reward ${JSON.stringify(s.name)} (${s.label}) did not return within ${timeoutMs} ms on a batch of ${n}. HINT: make it faster or raise the rewards timeoutMs.`,
          { reward: s.name, timeoutMs },
          { cause: err },
        );
      }
      if (err instanceof AscentError && err.code === 'ASCENT_INVALID_ARGUMENT') {
        throw new ConfigError(`Reward ${JSON.stringify(s.name)} (${s.label}): ${err.message}`, { reward: s.name }, { cause: err });
      }
      const msg = (err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message;
      throw new RewardError(
        `Reward ${JSON.stringify(s.name)} (${s.label}) failed: ${msg}. HINT: fix the reward function; the step is failed.`,
        { reward: s.name },
        { cause: err },
      );
    } finally {
      clearTimeout(timer);
    }
    if (!Array.isArray(out) || out.length !== n) {
      throw new RewardError(
        `Reward ${JSON.stringify(s.name)} (${s.label}) returned ${Array.isArray(out) ? `${out.length} values` : typeof out} for ${n} samples. HINT: return an array with one number or null per sample.`,
        { reward: s.name },
      );
    }
    out.forEach((v, i) => {
      if (v !== null && !(typeof v === 'number' && Number.isFinite(v))) {
        throw new RewardError(
          `Reward ${JSON.stringify(s.name)} (${s.label}) returned ${String(v)} for sample ${i}. HINT: return a finite number, or null where the reward does not apply.`,
          { reward: s.name, sample: i },
        );
      }
    });
    return out as RewardValues;
  }
}
