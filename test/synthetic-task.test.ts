import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../src/runtime/errors.js';
import { TaskPool } from '../src/runtime/actor-system/task-pool.js';
import {
  BOS,
  DIGIT_BASE,
  EOS,
  IGNORE_INDEX,
  MAX_LEN,
  MIN_LEN,
  PAD,
  SEP,
  VOCAB_SIZE,
  detokenize,
  digitTokens,
  makeBatch,
  makeProblem,
  promptDigits,
  reward,
  rewardBatch,
} from '../src/data/synthetic-task.js';
import { Prng } from '../src/model/prng.js';

describe('problems', () => {
  it('are deterministic per (seed, index), reversal with EOS, lengths 4..8 all used', () => {
    expect(makeProblem(1, 5)).toEqual(makeProblem(1, 5));
    const seen = new Set<number>();
    for (let i = 0; i < 300; i++) {
      const { prompt, answer } = makeProblem(9, i);
      const digits = prompt.slice(1, -1);
      expect(prompt[0]).toBe(BOS);
      expect(prompt[prompt.length - 1]).toBe(SEP);
      expect(digits.every((t) => t >= DIGIT_BASE && t < DIGIT_BASE + 10)).toBe(true);
      expect(answer).toEqual([...digits].reverse().concat(EOS));
      seen.add(digits.length);
    }
    expect([...seen].sort()).toEqual([4, 5, 6, 7, 8]);
    const a = Array.from({ length: 20 }, (_, i) => detokenize(makeProblem(1, i).prompt));
    const b = Array.from({ length: 20 }, (_, i) => detokenize(makeProblem(2, i).prompt));
    expect(a).not.toEqual(b);
    expect(new Set(a).size).toBeGreaterThan(15);
  });

  it('token helpers', () => {
    expect(digitTokens('3141')).toEqual([7, 5, 8, 5]);
    expect(detokenize([BOS, 7, 5, SEP, 5, 7, EOS, PAD, 40])).toBe('<bos>31<sep>13<eos><pad><40>');
    expect(() => digitTokens('3a')).toThrow(/Expected a string of digits but received '3a'/);
    expect(VOCAB_SIZE).toBe(64);
    expect([MIN_LEN, MAX_LEN]).toEqual([4, 8]);
  });
});

describe('makeBatch', () => {
  it('rows are prompt + answer + PAD; targets are the next answer token, -100 elsewhere', () => {
    const B = 16,
      S = 20;
    const { inputIds, targets, problems } = makeBatch(3, B, S);
    expect(inputIds).toBeInstanceOf(Int32Array);
    expect(targets).toBeInstanceOf(Int32Array);
    expect(inputIds.length).toBe(B * S);
    expect(targets.length).toBe(B * S);
    for (let b = 0; b < B; b++) {
      const row = Array.from(inputIds.subarray(b * S, (b + 1) * S));
      const tgt = Array.from(targets.subarray(b * S, (b + 1) * S));
      const { prompt, answer } = problems[b];
      const n = prompt.length + answer.length;
      expect(row).toEqual([...prompt, ...answer, ...new Array(S - n).fill(PAD)]);
      const supervised = tgt.map((t, i) => [i, t]).filter(([, t]) => t !== IGNORE_INDEX);
      expect(supervised.map(([, t]) => t)).toEqual(answer);
      expect(supervised[0][0]).toBe(prompt.length - 1); // the SEP position predicts the first answer token
      for (const [i, t] of supervised) expect(row[i + 1]).toBe(t);
    }
  });

  it('is deterministic per seed and differs across seeds', () => {
    expect(makeBatch(5, 4, 19).inputIds).toEqual(makeBatch(5, 4, 19).inputIds);
    expect(makeBatch(5, 4, 19).inputIds).not.toEqual(makeBatch(6, 4, 19).inputIds);
  });

  it('caps the length to fit seqLen and rejects a seqLen too short', () => {
    const { problems } = makeBatch(1, 32, 11);
    expect(problems.every((p) => p.prompt.length === 6)).toBe(true);
    expect(() => makeBatch(1, 2, 10)).toThrow(InvalidArgumentError);
    expect(() => makeBatch(1, 2, 10)).toThrow(/seqLen 10 is too short for 4-digit problems; expected at least 11/);
    expect(() => makeBatch(1, 0, 20)).toThrow(/Expected an integer >= 1 for batch but received 0 of type number/);
    expect(() => makeBatch(1, 2, 20, { minLen: 5, maxLen: 4 })).toThrow(/integer >= 5 for maxLen/);
  });
});

describe('reward', () => {
  const { prompt, answer } = { prompt: [BOS, ...digitTokens('31415'), SEP], answer: [...digitTokens('51413'), EOS] };

  it('exact match (EOS-terminated) is 1, whatever follows the EOS', () => {
    expect(reward(prompt, answer)).toBe(1);
    expect(reward(prompt, [...answer, 9, 9, PAD])).toBe(1);
    expect(reward([PAD, PAD, ...prompt], answer)).toBe(1); // left-padded prompt
  });

  it('partial credit by position, always below 1', () => {
    expect(reward(prompt, answer.slice(0, -1))).toBeCloseTo(0.9); // right digits, no EOS
    expect(reward(prompt, [...digitTokens('51410'), EOS])).toBeCloseTo((0.9 * 4) / 5);
    expect(reward(prompt, [...digitTokens('514130'), EOS])).toBeCloseTo((0.9 * 5) / 6); // one extra token
    expect(reward(prompt, [...digitTokens('514'), EOS])).toBeCloseTo((0.9 * 3) / 5);
    expect(reward(prompt, [...digitTokens('31415'), EOS])).toBeCloseTo((0.9 * 3) / 5); // copy, not reverse: 3 of 5 positions agree
    expect(reward(prompt, [])).toBe(0);
    expect(reward(prompt, [EOS])).toBe(0);
  });

  it('is in [0, 1] for random completions, and 1 only for the exact answer', () => {
    const rng = new Prng(77);
    for (let i = 0; i < 2000; i++) {
      const p = makeProblem(4, i);
      const completion = Array.from({ length: rng.int(0, 12) }, () =>
        rng.next() < 0.7 ? p.answer[rng.int(0, p.answer.length - 1)] : rng.int(0, VOCAB_SIZE - 1),
      );
      const r = reward(p.prompt, completion);
      expect(r).toBeGreaterThanOrEqual(0);
      expect(r).toBeLessThanOrEqual(1);
      const eos = completion.indexOf(EOS);
      const exact = eos >= 0 && completion.slice(0, eos + 1).join() === p.answer.join();
      expect(r === 1).toBe(exact);
    }
  });

  it('rejects something that is not a task prompt', () => {
    expect(() => reward([BOS, 7, 8], answer)).toThrow(/Expected a task prompt \[BOS, digits \(ids 4..13\), SEP\] but received \[1, 7, 8\]/);
    expect(() => reward([BOS, SEP], answer)).toThrow(InvalidArgumentError);
    expect(() => promptDigits([BOS, 40, SEP])).toThrow(InvalidArgumentError);
  });

  it('rewardBatch runs in a Piscina task pool (one plain argument, built module)', async () => {
    const pool = new TaskPool({ maxThreads: 1 });
    try {
      const problems = Array.from({ length: 4 }, (_, i) => makeProblem(8, i));
      const arg = { prompts: problems.map((p) => p.prompt), completions: problems.map((p, i) => (i % 2 ? p.answer : p.answer.slice(0, -1))) };
      expect(rewardBatch(arg)).toEqual([0.9, 1, 0.9, 1].map((x) => expect.closeTo(x, 10)));
      const viaPool = await pool.run<number[]>({ module: new URL('../dist/src/data/synthetic-task.js', import.meta.url), export: 'rewardBatch' }, arg);
      expect(viaPool).toEqual(rewardBatch(arg));
    } finally {
      await pool.close();
    }
    expect(() => rewardBatch({ prompts: [[1]], completions: [] })).toThrow(/arrays of equal length/);
  });
});
