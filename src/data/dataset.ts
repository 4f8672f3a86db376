/**
 * A prompt dataset: rows from JSONL or Parquet with a `prompt` column (a string,
 * used as is, or a chat list) or a `messages` column (a chat list, rendered with
 * the chat template and `add_generation_prompt`). Every other column is kept per
 * row and handed to the reward functions. Prompts are tokenized once at load;
 * `maxPromptLength` filters over-long prompts or truncates them from the LEFT
 * (the last tokens, where the generation prompt sits, are kept). `stats.maxPromptTokens`
 * sizes the rollout engine's KV cache from the data.
 */
import { resolve } from 'node:path';
import { ConfigError, InvalidArgumentError } from '../runtime/errors.js';
import { Prng, mixSeed } from '../model/prng.js';
import type { ChatMessage, ChatTemplate } from './chat-template.js';
import { DatasetConfigSchema, parseConfig, type DatasetConfig } from './config.js';
import { readRows, type Row, type SourceRow } from './readers.js';

export interface PromptTokenizer {
  encode(text: string): number[];
  decode(ids: readonly number[]): string;
}

export interface PromptSample {
  /** Index among the kept samples. */
  index: number;
  /** 1-based line (JSONL) or row (Parquet) in the file. */
  at: number;
  /** The prompt text the model sees (chat template applied; after truncation, the decoded kept tokens). */
  prompt: string;
  promptIds: number[];
  messages?: ChatMessage[];
  truncated: boolean;
  /** Every column except the prompt column. */
  columns: Row;
}

export interface DatasetStats {
  rows: number;
  kept: number;
  filtered: number;
  truncated: number;
  maxPromptTokens: number;
  meanPromptTokens: number;
}

/** KV cache tokens per sequence the rollout engine needs for this data: longest prompt + completion budget. */
export function kvCacheTokensFor(stats: DatasetStats, maxCompletionLength: number): number {
  if (!Number.isInteger(maxCompletionLength) || maxCompletionLength <= 0) {
    throw new InvalidArgumentError(`maxCompletionLength must be a positive integer, got ${maxCompletionLength}. HINT: pass the rollout's max new tokens.`);
  }
  return stats.maxPromptTokens + maxCompletionLength;
}

export interface PromptBatch {
  epoch: number;
  /** Step index over all epochs, from 0. */
  step: number;
  samples: PromptSample[];
}

export interface PromptDatasetOptions {
  tokenizer: PromptTokenizer;
  /** Needed when prompts are chat lists. */
  chatTemplate?: ChatTemplate;
  addGenerationPrompt?: boolean;
  chatTemplateKwargs?: Record<string, unknown>;
}

function asMessages(v: unknown, where: string): ChatMessage[] {
  if (!Array.isArray(v) || v.length === 0) throw new ConfigError(`${where}: expected a non-empty list of { role, content } messages. HINT: fix the row.`);
  v.forEach((m, i) => {
    if (!m || typeof m !== 'object' || typeof (m as Row).role !== 'string' || typeof (m as Row).content !== 'string') {
      throw new ConfigError(`${where}[${i}]: expected { role: string, content: string }, got ${JSON.stringify(m)}. HINT: fix the row.`);
    }
  });
  return v as ChatMessage[];
}

export class PromptDataset {
  private constructor(
    readonly config: DatasetConfig,
    readonly samples: readonly PromptSample[],
    readonly stats: DatasetStats,
  ) {}

  /** Reads, renders and tokenizes the dataset of `config` (camelCase or TRL names; see config.ts). */
  static async load(config: unknown, opts: PromptDatasetOptions): Promise<PromptDataset> {
    const cfg = parseConfig(DatasetConfigSchema, config, 'dataset');
    const path = resolve(cfg.path);
    const rows = await readRows(path, cfg.format);
    return PromptDataset.fromRows(cfg, path, rows, opts);
  }

  /** Builds a dataset from already read rows (`file` names them in errors). */
  static fromRows(cfg: DatasetConfig, file: string, rows: readonly SourceRow[], opts: PromptDatasetOptions): PromptDataset {
    if (rows.length === 0) throw new ConfigError(`Dataset ${file} has no rows. HINT: check the file.`, { path: file });
    const samples: PromptSample[] = [];
    let filtered = 0;
    let truncated = 0;
    for (const { at, row } of rows) {
      const where = `Dataset ${file} row ${at}`;
      const hasPrompt = 'prompt' in row && row.prompt !== null && row.prompt !== undefined;
      const hasMessages = 'messages' in row && row.messages !== null && row.messages !== undefined;
      if (hasPrompt === hasMessages) {
        throw new ConfigError(
          `${where}: ${hasPrompt ? 'has both a `prompt` and a `messages` column' : 'has neither a `prompt` nor a `messages` column'} (columns: ${Object.keys(row).join(', ') || 'none'}). HINT: give each row exactly one of \`prompt\` (string or chat list) or \`messages\` (chat list).`,
          { path: file, row: at },
        );
      }
      const col = hasPrompt ? 'prompt' : 'messages';
      const value = row[col];
      let text: string;
      let messages: ChatMessage[] | undefined;
      if (typeof value === 'string') {
        if (col === 'messages')
          throw new ConfigError(`${where} column messages: expected a chat list, got a string. HINT: use a \`prompt\` column for plain text.`, {
            path: file,
            row: at,
            column: col,
          });
        text = value;
      } else {
        messages = asMessages(value, `${where} column ${col}`);
        if (!opts.chatTemplate)
          throw new ConfigError(
            `${where} column ${col} is a chat list but no chat template was given. HINT: pass chatTemplate (ChatTemplate.fromTokenizer(tokenizer)).`,
            { path: file, row: at, column: col },
          );
        text = opts.chatTemplate.render(messages, { addGenerationPrompt: opts.addGenerationPrompt ?? true, kwargs: opts.chatTemplateKwargs });
      }
      let ids = opts.tokenizer.encode(text);
      if (ids.length === 0)
        throw new ConfigError(`${where} column ${col}: the prompt is empty after tokenization. HINT: remove the row or give it text.`, {
          path: file,
          row: at,
          column: col,
        });
      let cut = false;
      if (cfg.maxPromptLength !== undefined && ids.length > cfg.maxPromptLength) {
        if (cfg.overlong === 'filter') {
          filtered++;
          continue;
        }
        ids = ids.slice(ids.length - cfg.maxPromptLength);
        text = opts.tokenizer.decode(ids);
        cut = true;
        truncated++;
      }
      const columns: Row = { ...row };
      delete columns[col];
      samples.push({ index: samples.length, at, prompt: text, promptIds: ids, messages, truncated: cut, columns });
    }
    if (samples.length === 0) {
      throw new ConfigError(
        `Dataset ${file}: all ${rows.length} rows are longer than maxPromptLength=${cfg.maxPromptLength} tokens and were filtered. HINT: raise maxPromptLength or use overlong: 'truncate'.`,
        { path: file },
      );
    }
    if (samples.length < cfg.promptsPerStep && !cfg.keepLastBatch) {
      throw new ConfigError(
        `Dataset ${file}: ${samples.length} usable prompts, fewer than promptsPerStep=${cfg.promptsPerStep}; no full step. HINT: lower promptsPerStep or set keepLastBatch.`,
        { path: file },
      );
    }
    const lens = samples.map((s) => s.promptIds.length);
    const stats: DatasetStats = {
      rows: rows.length,
      kept: samples.length,
      filtered,
      truncated,
      maxPromptTokens: Math.max(...lens),
      meanPromptTokens: lens.reduce((a, b) => a + b, 0) / lens.length,
    };
    return new PromptDataset(cfg, samples, stats);
  }

  get stepsPerEpoch(): number {
    const n = this.samples.length / this.config.promptsPerStep;
    return this.config.keepLastBatch ? Math.ceil(n) : Math.floor(n);
  }

  get totalSteps(): number {
    return this.stepsPerEpoch * this.config.epochs;
  }

  /** Sample order of `epoch`: identity without shuffle, else a Fisher-Yates permutation seeded by (seed, epoch). */
  epochOrder(epoch: number): number[] {
    if (!Number.isInteger(epoch) || epoch < 0) throw new InvalidArgumentError(`epoch must be a non-negative integer, got ${epoch}.`);
    const order = this.samples.map((_, i) => i);
    if (!this.config.shuffle) return order;
    const rng = new Prng(mixSeed(this.config.seed) ^ Math.imul(epoch + 1, 0x9e3779b1));
    for (let i = order.length - 1; i > 0; i--) {
      const j = rng.int(0, i);
      [order[i], order[j]] = [order[j]!, order[i]!];
    }
    return order;
  }

  /** Batches of `promptsPerStep` prompts, epoch after epoch; starts at `fromStep` (resume). */
  *batches(fromStep = 0): Generator<PromptBatch> {
    const per = this.config.promptsPerStep;
    const steps = this.stepsPerEpoch;
    for (let step = fromStep; step < this.totalSteps; step++) {
      const epoch = Math.floor(step / steps);
      const order = this.epochOrder(epoch);
      const k = step % steps;
      yield { epoch, step, samples: order.slice(k * per, (k + 1) * per).map((i) => this.samples[i]!) };
    }
  }
}
