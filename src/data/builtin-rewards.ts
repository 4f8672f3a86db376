/**
 * Built-in reward functions, referable by name (`{ builtin: 'accuracy', column: 'answer' }`).
 * They run in the Piscina pool like user rewards; options arrive in `input.options`.
 */
import { rewardBatch } from './synthetic-task.js';
import type { RewardInput, RewardValues } from './reward-types.js';

/**
 * The answer a completion gives: the content of the last `\boxed{...}`, else the text
 * after the last `####` (GSM8K style), else the content of the last `<answer>...</answer>`,
 * else the last number in the text, else the whole text.
 */
export function extractAnswer(text: string): string {
  const boxed = [...text.matchAll(/\\boxed\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}/g)];
  if (boxed.length) return boxed.at(-1)![1]!;
  const hashes = text.lastIndexOf('####');
  if (hashes >= 0) return text.slice(hashes + 4);
  const tags = [...text.matchAll(/<answer>([\s\S]*?)<\/answer>/g)];
  if (tags.length) return tags.at(-1)![1]!;
  const nums = text.match(/-?\d[\d,]*(?:\.\d+)?/g);
  if (nums) return nums.at(-1)!;
  return text;
}

/** Trim, lowercase, drop `$`, trailing `.`, and thousands commas; numbers compare by value. */
export function normalizeAnswer(s: string): string {
  const t = s
    .trim()
    .replace(/^\$+|\$+$/g, '')
    .replace(/\.$/, '')
    .trim()
    .toLowerCase();
  const n = t.replace(/,/g, '');
  return /^-?\d+(\.\d+)?$/.test(n) ? String(Number(n)) : t;
}

/** 1 if the extracted answer equals the `column` answer (default `answer`) after normalization, else 0; null when the row has no answer. */
export function accuracy(input: RewardInput): RewardValues {
  const column = (input.options?.column as string | undefined) ?? 'answer';
  return input.completions.map((c, i) => {
    const ref = input.columns[i]?.[column];
    if (ref === null || ref === undefined) return null;
    return normalizeAnswer(extractAnswer(c)) === normalizeAnswer(extractAnswer(String(ref))) ? 1 : 0;
  });
}

/** 1 if the whole completion matches `pattern` (dot matches newlines), else 0. */
export function format(input: RewardInput): RewardValues {
  const pattern = input.options?.pattern;
  if (typeof pattern !== 'string') throw new TypeError('the format reward needs a `pattern` (a regular expression string).');
  const re = new RegExp(`^(?:${pattern})$`, 's');
  return input.completions.map((c) => (re.test(c) ? 1 : 0));
}

/**
 * DAPO soft overlong punishment on the completion length L (tokens), with
 * L_max = maxCompletionLength and L_cache = cacheLength:
 * 0 if L <= L_max - L_cache; ((L_max - L_cache) - L) / L_cache if L_max - L_cache < L <= L_max; -1 if L > L_max.
 */
export function overlongPenalty(length: number, maxCompletionLength: number, cacheLength: number): number {
  const expected = maxCompletionLength - cacheLength;
  if (length <= expected) return 0;
  if (length <= maxCompletionLength) return (expected - length) / cacheLength;
  return -1;
}

export function overlong(input: RewardInput): RewardValues {
  const max = input.options?.maxCompletionLength;
  const cache = input.options?.cacheLength;
  if (typeof max !== 'number' || typeof cache !== 'number' || cache > max) {
    throw new TypeError(
      `the overlong reward needs maxCompletionLength and cacheLength (cacheLength <= maxCompletionLength), got ${JSON.stringify({ max, cache })}.`,
    );
  }
  return input.completionIds.map((ids) => overlongPenalty(ids.length, max, cache));
}

/** The synthetic digit-reversal task's reward (src/data/synthetic-task.ts), on token ids. */
export function reverse_digits(input: RewardInput): RewardValues {
  return rewardBatch({ prompts: input.promptIds, completions: input.completionIds });
}
