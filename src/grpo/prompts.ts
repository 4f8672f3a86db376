/**
 * Where a GRPO run's prompts come from, and how its completions read as text:
 *
 * - the built-in digit task (no `dataset` key): prompts drawn from the synthetic task's
 *   seeded stream, its 64-token vocabulary, EOS id 2, text by `detokenize`, the answer as
 *   a column (what the `reverse_digits` / `accuracy` rewards read);
 * - a user's dataset (`dataset` key): JSONL or Parquet rows through the model folder's
 *   tokenizer and chat template (src/data), epochs in a seeded order, every EOS id of
 *   generation_config.json / the tokenizer stopping generation, completions decoded without
 *   special tokens; held-out prompts from `eval.dataset`.
 *
 * Training round r of step s draws `count` prompts from the stream at block (s − 1) for
 * r = 0 (one block per step, in order) and from blocks no other step uses for r > 0 (the
 * extra rounds of dynamic sampling), so a run's prompts do not depend on how often it resampled.
 */
import { dirname, resolve } from 'node:path';
import { existsSync, statSync } from 'node:fs';
import { ConfigError } from '../runtime/errors.js';
import { detokenize, EOS, makeProblem, VOCAB_SIZE } from '../data/synthetic-task.js';
import { loadTokenizer, type LoadedTokenizer } from '../data/tokenizer.js';
import { ChatTemplate } from '../data/chat-template.js';
import { PromptDataset } from '../data/dataset.js';
import type { DatasetConfig } from '../data/config.js';
import { makeBatch } from '../data/synthetic-task.js';
import type { TrainBatch } from '../train/strategy.js';
import { buildTrainBatch } from './rollout-batch.js';

export interface PromptItem {
  ids: number[];
  text: string;
  /** The row's other columns (rewards read them). */
  columns: Record<string, unknown>;
}

export interface DecodedCompletion {
  text: string;
  finishReason: 'stop' | 'length';
}

export interface PromptSource {
  /** Longest prompt in tokens (sizes the engines' KV cache with the completion budget). */
  readonly maxPromptTokens: number;
  /** Ids generation stops after. */
  readonly stopIds: readonly number[];
  /** Tokens the prompts and stop ids use (must fit the model's vocabulary). */
  readonly vocabSize: number;
  /** Training prompts of round `round` of step `step` (1-based). */
  train(step: number, round: number, count: number): PromptItem[];
  /** The held-out evaluation prompts (the first `count`). */
  heldOut(count: number): PromptItem[];
  /** A generated completion as text (stop id left out) with its finish reason. */
  decode(ids: readonly number[]): DecodedCompletion;
  /** Supervised warm-up batch `i`: prompts with their reference completions (stop id appended). */
  sft(i: number, batch: number): TrainBatch;
}

/** Blocks of the prompt stream an extra round may use: far past every training step's own block. */
const ROUND_STRIDE = 1_000_003;
/** Seed offset of the digit task's held-out stream (never drawn for training). */
const EVAL_STREAM = 104_729;

export function digitTaskSource(seed: number): PromptSource {
  const item = (s: number, i: number): PromptItem => {
    const p = makeProblem(s, i);
    return { ids: p.prompt, text: detokenize(p.prompt), columns: { answer: detokenize(p.answer.slice(0, -1)) } };
  };
  return {
    maxPromptTokens: 3 + 8, // BOS + up to 8 digits + SEP
    stopIds: [EOS],
    vocabSize: VOCAB_SIZE,
    // Round 0 keeps the stream the quickstart always used: problem step·count + i.
    train: (step, round, count) => Array.from({ length: count }, (_, i) => item(round === 0 ? seed : seed + 7_919 * round, step * count + i)),
    heldOut: (count) => Array.from({ length: count }, (_, i) => item(seed + EVAL_STREAM, i)),
    decode: (ids) => {
      const at = ids.indexOf(EOS);
      return { text: detokenize(at < 0 ? ids : ids.slice(0, at)), finishReason: at < 0 ? 'length' : 'stop' };
    },
    sft: (i, batch) => {
      const b = makeBatch(seed * 7_919 + i, batch, 20);
      return { inputIds: b.inputIds, targets: b.targets, batch, seqLen: 20 };
    },
  };
}

export interface DatasetSourceOptions {
  dataset: Omit<DatasetConfig, 'promptsPerStep' | 'keepLastBatch'>;
  evalDataset?: string;
  tokenizerDir: string;
  addGenerationPrompt: boolean;
  chatTemplateKwargs: Record<string, unknown>;
  promptsPerStep: number;
  /** The column holding reference completions for the supervised warm-up (text). */
  sftColumn: string;
}

export async function datasetSource(o: DatasetSourceOptions): Promise<PromptSource> {
  const tok = loadTokenizer(o.tokenizerDir);
  const chatTemplate = tok.chatTemplate ? ChatTemplate.fromTokenizer(tok) : undefined;
  const opts = {
    tokenizer: tok,
    ...(chatTemplate ? { chatTemplate } : {}),
    addGenerationPrompt: o.addGenerationPrompt,
    chatTemplateKwargs: o.chatTemplateKwargs,
  };
  const train = await PromptDataset.load({ ...o.dataset, promptsPerStep: o.promptsPerStep, keepLastBatch: false }, opts);
  const held = o.evalDataset
    ? await PromptDataset.load({ ...o.dataset, path: o.evalDataset, shuffle: false, promptsPerStep: 1, keepLastBatch: true }, opts)
    : null;
  const perEpoch = train.stepsPerEpoch * o.promptsPerStep;
  const total = perEpoch * train.config.epochs;
  const orders = new Map<number, number[]>();
  const at = (k: number) => {
    const epoch = Math.floor((k % total) / perEpoch);
    if (!orders.has(epoch)) orders.set(epoch, train.epochOrder(epoch));
    const s = train.samples[orders.get(epoch)![k % perEpoch]!]!;
    return { ids: s.promptIds, text: s.prompt, columns: s.columns };
  };
  return {
    maxPromptTokens: Math.max(train.stats.maxPromptTokens, held?.stats.maxPromptTokens ?? 0),
    stopIds: tok.eosIds,
    vocabSize: tok.vocabSize,
    train: (step, round, count) => {
      const block = step - 1 + round * ROUND_STRIDE;
      return Array.from({ length: count }, (_, i) => at(block * count + i));
    },
    heldOut: (count) => {
      if (!held)
        throw new ConfigError(
          'GRPO: eval on a dataset needs eval.dataset (a held-out JSONL or Parquet file of the same columns). HINT: add eval.dataset, or drop eval.',
        );
      if (held.samples.length < count)
        throw new ConfigError(`GRPO: eval.prompts = ${count} but ${held.config.path} has ${held.samples.length} usable prompts. HINT: lower eval.prompts.`);
      return held.samples.slice(0, count).map((s) => ({ ids: s.promptIds, text: s.prompt, columns: s.columns }));
    },
    decode: (ids) => decodeWith(tok, ids),
    sft: (i, batch) => {
      const rows = Array.from({ length: batch }, (_, j) => train.samples[(i * batch + j) % train.samples.length]!);
      const completions = rows.map((s) => {
        const text = s.columns[o.sftColumn];
        if (typeof text !== 'string') {
          throw new ConfigError(
            `GRPO: the supervised warm-up reads reference completions from column ${JSON.stringify(o.sftColumn)}, but ${train.config.path} row ${s.at} has ${text === undefined ? 'no such column' : JSON.stringify(text)}. HINT: set sftWarmup.column to the column holding the answers as text, or sftWarmup.steps to 0.`,
            { path: train.config.path, row: s.at },
          );
        }
        return [...tok.encode(text, { addSpecialTokens: false }), tok.eosIds[0]!];
      });
      return buildTrainBatch({ prompts: rows.map((s) => s.promptIds), completions });
    },
  };
}

function decodeWith(tok: LoadedTokenizer, ids: readonly number[]): DecodedCompletion {
  const d = tok.decodeCompletion(ids);
  return { text: d.text, finishReason: d.finishReason };
}

/** The tokenizer folder of a run: `tokenizer.path`, else the model folder (or the folder of its config.json). */
export function tokenizerDirOf(model: string, tokenizerPath: string | undefined): string {
  if (tokenizerPath) return resolve(tokenizerPath);
  return existsSync(model) && statSync(model).isDirectory() ? resolve(model) : dirname(resolve(model));
}
