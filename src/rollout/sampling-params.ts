/**
 * Sampling parameters of RolloutEngine.generate(), validated in one place.
 *
 * Log-prob convention (the trainer compares against it): the log-prob returned with each
 * sampled token is log softmax(logits / temperature)[token] under the SAME temperature
 * the sampling used, over the full vocabulary (top-k / top-p truncation is not applied
 * to it). For greedy decoding (temperature 0) it is the untempered log softmax(logits)
 * (temperature 1). RolloutEngine.computeLogprobs(ids, { temperature }) takes the
 * temperature explicitly and gives the same numbers for the same sequences.
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import { describe } from '../runtime/device/dtype.js';
import { checkOptions } from '../runtime/device/device.js';

export interface SamplingParams {
  /** Tokens to generate at most per prompt (required). */
  maxTokens: number;
  /** 0 = greedy (argmax, ties → lower id). Default 1. */
  temperature?: number;
  /** Keep the k most likely tokens (0 = all). Default 0. */
  topK?: number;
  /** Nucleus mass in (0, 1]. Default 1. */
  topP?: number;
  /** Philox seed, a non-negative integer < 2^53. Default 0. Row b of step t draws from (seed, t, b). */
  seed?: number;
  /** Generation of a row stops after this token (included in the output). Default the synthetic task's EOS. */
  eosTokenId?: number;
  /** More ids a row stops after (vLLM's stop_token_ids: e.g. every EOS id of generation_config.json). */
  stopTokenIds?: readonly number[];
}

export type ResolvedSampling = Required<Omit<SamplingParams, 'stopTokenIds'>> & { stopTokenIds: ReadonlySet<number> };

const KEYS = ['maxTokens', 'temperature', 'topK', 'topP', 'seed', 'eosTokenId', 'stopTokenIds'] as const;

function num(v: unknown, name: string, ok: (x: number) => boolean, expected: string): number {
  if (typeof v !== 'number' || !ok(v)) throw new InvalidArgumentError(`Expected ${expected} for ${name} but received ${describe(v)}.`, { argument: name });
  return v;
}

const isInt = (x: number) => Number.isSafeInteger(x);

/** The default stop token: id 2, the EOS of the built-in digit task and of the tiny example models. */
const DEFAULT_EOS = 2;

export function resolveSampling(p: SamplingParams, vocabSize: number): ResolvedSampling {
  checkOptions(p, KEYS, 'generate()');
  if (p === undefined) throw new InvalidArgumentError('generate() requires sampling params with at least { maxTokens }.', { argument: 'params' });
  return {
    maxTokens: num(p.maxTokens, 'maxTokens', (x) => isInt(x) && x >= 1, 'a positive integer'),
    temperature: num(p.temperature ?? 1, 'temperature', (x) => Number.isFinite(x) && x >= 0, 'a finite number >= 0'),
    topK: num(p.topK ?? 0, 'topK', (x) => isInt(x) && x >= 0, 'a non-negative integer (0 = all tokens)'),
    topP: num(p.topP ?? 1, 'topP', (x) => x > 0 && x <= 1, 'a number in (0, 1]'),
    seed: num(p.seed ?? 0, 'seed', (x) => isInt(x) && x >= 0, 'a non-negative integer < 2^53'),
    eosTokenId: num(p.eosTokenId ?? DEFAULT_EOS, 'eosTokenId', (x) => isInt(x) && x >= 0 && x < vocabSize, `a token id in [0, ${vocabSize})`),
    stopTokenIds: stopIds(p.stopTokenIds, vocabSize),
  };
}

function stopIds(v: unknown, vocabSize: number): ReadonlySet<number> {
  if (v === undefined) return new Set();
  if (!Array.isArray(v))
    throw new InvalidArgumentError(`Expected an array of token ids for stopTokenIds but received ${describe(v)}.`, { argument: 'stopTokenIds' });
  return new Set(v.map((x, i) => num(x, `stopTokenIds[${i}]`, (y) => isInt(y) && y >= 0 && y < vocabSize, `a token id in [0, ${vocabSize})`)));
}

/** The temperature the returned log-probs use for a sampling temperature (1 for greedy). */
export function logprobTemperature(samplingTemperature: number): number {
  return samplingTemperature > 0 ? samplingTemperature : 1;
}

/** Checks token sequences: a non-empty array of non-empty arrays of ids in [0, vocabSize). */
export function checkSequences(seqs: unknown, vocabSize: number, what: string, minLen = 1): number[][] {
  if (!Array.isArray(seqs) || seqs.length === 0)
    throw new InvalidArgumentError(`Expected a non-empty array of token-id arrays for ${what} but received ${describe(seqs)}.`, { argument: what });
  seqs.forEach((s, b) => {
    if (!Array.isArray(s) && !(s instanceof Int32Array))
      throw new InvalidArgumentError(`${what}[${b}] must be an array of token ids but is ${describe(s)}.`, { argument: what, row: b });
    if (s.length < minLen) throw new InvalidArgumentError(`${what}[${b}] has ${s.length} tokens; at least ${minLen} needed.`, { argument: what, row: b });
    for (let t = 0; t < s.length; t++) {
      const id = s[t];
      if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id >= vocabSize) {
        throw new InvalidArgumentError(`${what}[${b}][${t}] is ${describe(id)}; expected a token id in [0, ${vocabSize}).`, {
          argument: what,
          row: b,
          position: t,
        });
      }
    }
  });
  // By push, not map(): the rows' array then has one map whether or not this function is optimised
  // (an inlined map() returns a HOLEY array, the builtin a PACKED one), so its readers stay optimised.
  const rows: number[][] = [];
  for (const s of seqs) rows.push(Array.from(s as ArrayLike<number>));
  return rows;
}
