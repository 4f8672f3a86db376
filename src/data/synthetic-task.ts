/**
 * The shipped synthetic task: reverse a string of 4–8 digits.
 *
 *   prompt     = [BOS, d1, ..., dn, SEP]
 *   completion = [dn, ..., d1, EOS]
 *
 * Tokens (vocab 64): 0 PAD, 1 BOS, 2 EOS, 3 SEP, digits '0'..'9' are ids 4..13; ids 14..63 are
 * unused (never produced, any of them in a completion is simply wrong). A 2-layer tiny model
 * learns it in a few hundred supervised steps, and the reward gives GRPO a graded signal.
 *
 * Invariants: everything is a pure function of its arguments (seeded, no Math.random, no I/O),
 * and this module imports nothing heavy, so `reward` / `rewardBatch` can run in a Piscina task
 * pool (`rewardBatch` takes the single argument a pool task gets).
 */
import { InvalidArgumentError } from '../runtime/errors.js';
import { describe } from '../runtime/device/dtype.js';
import { Prng, mixSeed } from '../model/prng.js';

export const PAD = 0;
export const BOS = 1;
export const EOS = 2;
export const SEP = 3;
export const VOCAB_SIZE = 64;
export const DIGIT_BASE = 4;
export const NUM_DIGITS = 10;
export const MIN_LEN = 4;
export const MAX_LEN = 8;
/** Targets at prompt and padding positions (the PyTorch cross-entropy default). */
export { IGNORE_INDEX } from '../model/labels.js';
import { IGNORE_INDEX } from '../model/labels.js';
/** Best reward of a completion that is not an exact match (so exact is always strictly better). */
export const PARTIAL_CREDIT_MAX = 0.9;

export interface Problem {
  /** [BOS, digits..., SEP]. */
  prompt: number[];
  /** The correct completion: [reversed digits..., EOS]. */
  answer: number[];
}

export interface ProblemOptions {
  minLen?: number;
  maxLen?: number;
}

function checkInt(value: unknown, what: string, min: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw new InvalidArgumentError(`Expected an integer >= ${min} for ${what} but received ${describe(value)}.`, { argument: what, value: String(value) });
  }
  return value;
}

function lengths(opts: ProblemOptions): [number, number] {
  const lo = checkInt(opts.minLen ?? MIN_LEN, 'minLen', 1);
  const hi = checkInt(opts.maxLen ?? MAX_LEN, 'maxLen', lo);
  return [lo, hi];
}

/** Problem number `index` of the stream for `seed` (independent of every other index). */
export function makeProblem(seed: number, index: number, opts: ProblemOptions = {}): Problem {
  const [lo, hi] = lengths(opts);
  const rng = new Prng(mixSeed(seed) ^ mixSeed(checkInt(index, 'index', 0) + 0x5bd1e995));
  const n = rng.int(lo, hi);
  const digits = Array.from({ length: n }, () => DIGIT_BASE + rng.int(0, NUM_DIGITS - 1));
  return { prompt: [BOS, ...digits, SEP], answer: [...digits].reverse().concat(EOS) };
}

export interface Batch {
  batch: number;
  seqLen: number;
  /** [batch, seqLen] row-major: prompt, answer, then PAD. */
  inputIds: Int32Array;
  /**
   * [batch, seqLen], already shifted for next-token prediction: `targets[b, t]` is the token at
   * t + 1 when that token is part of the answer (digits or EOS), else IGNORE_INDEX.
   */
  targets: Int32Array;
  problems: Problem[];
}

/**
 * A supervised batch for `seed` (row b is problem b of the stream). Lengths are capped so
 * each sequence fits in `seqLen` (a full 8-digit problem needs 19 tokens).
 */
export function makeBatch(seed: number, batch: number, seqLen: number, opts: ProblemOptions = {}): Batch {
  checkInt(batch, 'batch', 1);
  checkInt(seqLen, 'seqLen', 1);
  const [lo, hiWanted] = lengths(opts);
  const hi = Math.min(hiWanted, Math.floor((seqLen - 3) / 2));
  if (hi < lo) {
    throw new InvalidArgumentError(
      `seqLen ${seqLen} is too short for ${lo}-digit problems; expected at least ${2 * lo + 3} (BOS + digits + SEP + digits + EOS).`,
      { argument: 'seqLen', value: seqLen },
    );
  }
  const inputIds = new Int32Array(batch * seqLen); // PAD = 0
  const targets = new Int32Array(batch * seqLen).fill(IGNORE_INDEX);
  const problems: Problem[] = [];
  for (let b = 0; b < batch; b++) {
    const p = makeProblem(seed, b, { minLen: lo, maxLen: hi });
    problems.push(p);
    const row = b * seqLen;
    const seq = [...p.prompt, ...p.answer];
    inputIds.set(seq, row);
    for (let t = p.prompt.length - 1; t < seq.length - 1; t++) targets[row + t] = seq[t + 1];
  }
  return { batch, seqLen, inputIds, targets, problems };
}

/** The digits of a task prompt (leading PADs allowed, for left-padded batches). */
export function promptDigits(prompt: readonly number[]): number[] {
  let i = 0;
  while (prompt[i] === PAD) i++;
  if (prompt[i] === BOS) i++;
  const digits = prompt.slice(i, prompt.length - 1);
  const ok = prompt[prompt.length - 1] === SEP && digits.length > 0 && digits.every((t) => t >= DIGIT_BASE && t < DIGIT_BASE + NUM_DIGITS);
  if (!ok) {
    throw new InvalidArgumentError(
      `Expected a task prompt [BOS, digits (ids ${DIGIT_BASE}..${DIGIT_BASE + NUM_DIGITS - 1}), SEP] but received [${prompt.slice(0, 24).join(', ')}${prompt.length > 24 ? ', ...' : ''}].`,
      { argument: 'prompt' },
    );
  }
  return digits;
}

/**
 * Reward of `completion` for `prompt`, in [0, 1]. Exactly the reversed digits followed by EOS
 * scores 1 (tokens after the first EOS are ignored). Anything else scores
 * PARTIAL_CREDIT_MAX × (positions matching the reversed digits) / max(expected length,
 * produced length before EOS), so a missing EOS, extra tokens or wrong digits all cost.
 */
export function reward(prompt: readonly number[], completion: readonly number[]): number {
  const expected = promptDigits(prompt).reverse();
  const eos = completion.indexOf(EOS);
  const got = eos < 0 ? completion : completion.slice(0, eos);
  let matches = 0;
  for (let i = 0; i < Math.min(got.length, expected.length); i++) if (got[i] === expected[i]) matches++;
  if (eos >= 0 && matches === expected.length && got.length === expected.length) return 1;
  return (PARTIAL_CREDIT_MAX * matches) / Math.max(expected.length, got.length);
}

/** Pool-task form of `reward`: one argument in, one reward per (prompt, completion) pair out. */
export function rewardBatch(arg: { prompts: readonly (readonly number[])[]; completions: readonly (readonly number[])[] }): number[] {
  if (!arg || !Array.isArray(arg.prompts) || !Array.isArray(arg.completions) || arg.prompts.length !== arg.completions.length) {
    throw new InvalidArgumentError(`Expected {prompts, completions} arrays of equal length but received ${describe(arg)}.`, { argument: 'arg' });
  }
  return arg.prompts.map((p, i) => reward(p, arg.completions[i]));
}

/** Readable form for logs: "<bos>3141<sep>1413<eos>" (digits as characters, others in brackets). */
export function detokenize(tokens: readonly number[]): string {
  const special: Record<number, string> = { [PAD]: '<pad>', [BOS]: '<bos>', [EOS]: '<eos>', [SEP]: '<sep>' };
  return tokens.map((t) => special[t] ?? (t >= DIGIT_BASE && t < DIGIT_BASE + NUM_DIGITS ? String(t - DIGIT_BASE) : `<${t}>`)).join('');
}

/** Tokens of a digit string, e.g. "3141" → [7, 5, 8, 5]. */
export function digitTokens(text: string): number[] {
  if (!/^[0-9]+$/.test(text)) {
    throw new InvalidArgumentError(`Expected a string of digits but received ${describe(text)}.`, { argument: 'text' });
  }
  return [...text].map((c) => DIGIT_BASE + Number(c));
}
