/**
 * A model folder's HF tokenizer (tokenizer.json + tokenizer_config.json, plus
 * generation_config.json for the EOS ids) loaded with @huggingface/tokenizers,
 * the pure-JS port of HF tokenizers (BPE, WordPiece, Unigram models). No
 * hand-written BPE here.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { ConfigError } from '../runtime/errors.js';

/** Tokenizer models @huggingface/tokenizers 0.2 implements. */
export const SUPPORTED_TOKENIZER_MODELS = ['BPE', 'WordPiece', 'Unigram'] as const;

type Json = Record<string, unknown>;

function readJson(path: string, required: boolean): Json | undefined {
  if (!existsSync(path)) {
    if (!required) return undefined;
    throw new ConfigError(
      `The tokenizer file ${path} is missing. HINT: point the tokenizer at a HF model folder holding tokenizer.json and tokenizer_config.json.`,
      { path },
    );
  }
  try {
    const v: unknown = JSON.parse(readFileSync(path, 'utf8'));
    if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error('top level is not a JSON object');
    return v as Json;
  } catch (err) {
    throw new ConfigError(
      `The tokenizer file ${path} is not valid JSON: ${(err as Error).message}. HINT: re-download it from the model repository.`,
      { path },
      { cause: err },
    );
  }
}

/** A token given as a string or an AddedToken-like object `{ content }` in tokenizer_config.json. */
function tokenText(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as Json).content === 'string') return (v as Json).content as string;
  return undefined;
}

export interface LoadedTokenizer {
  readonly dir: string;
  /** Raw tokenizer_config.json (chat_template, special tokens, ...). */
  readonly config: Readonly<Json>;
  readonly chatTemplate: string | undefined;
  readonly bosToken: string | undefined;
  readonly eosToken: string | undefined;
  readonly padToken: string | undefined;
  /** Every id generation stops on: generation_config.json eos_token_id (int or list) ∪ the tokenizer's eos. Sorted. */
  readonly eosIds: readonly number[];
  /** Pad id: pad_token, else generation_config pad_token_id, else the first EOS id. */
  readonly padId: number;
  readonly vocabSize: number;
  encode(text: string, opts?: { addSpecialTokens?: boolean }): number[];
  decode(ids: readonly number[], opts?: { skipSpecialTokens?: boolean }): string;
  tokenToId(token: string): number | undefined;
  idToToken(id: number): string | undefined;
  isSpecial(id: number): boolean;
  /**
   * A generated completion for rewards and logs: cut after the first id of `eosIds`
   * (finishReason 'stop'; the EOS id is kept in `ids`, left out of `text`) or kept whole
   * (finishReason 'length'); `text` decoded without special tokens.
   */
  decodeCompletion(ids: readonly number[]): { text: string; ids: number[]; finishReason: 'stop' | 'length' };
}

/** Loads the tokenizer of a HF model folder. Errors name the file at fault. */
export function loadTokenizer(dir: string): LoadedTokenizer {
  const tokPath = join(dir, 'tokenizer.json');
  const cfgPath = join(dir, 'tokenizer_config.json');
  const genPath = join(dir, 'generation_config.json');
  const tokJson = readJson(tokPath, true)!;
  const config = readJson(cfgPath, true)!;
  const gen = readJson(genPath, false);

  const model = tokJson.model as Json | undefined;
  const modelType = typeof model?.type === 'string' ? model.type : undefined;
  if (!modelType || !(SUPPORTED_TOKENIZER_MODELS as readonly string[]).includes(modelType)) {
    throw new ConfigError(
      `${tokPath}: tokenizer model type ${JSON.stringify(modelType ?? null)} is not supported; supported: ${SUPPORTED_TOKENIZER_MODELS.join(', ')}. HINT: use a model whose tokenizer.json has one of these model types.`,
      { path: tokPath, modelType },
    );
  }
  let tok: Tokenizer;
  try {
    tok = new Tokenizer(tokJson, config);
  } catch (err) {
    throw new ConfigError(
      `${tokPath}: could not build the tokenizer: ${(err as Error).message}. HINT: check that tokenizer.json and tokenizer_config.json come from the same model.`,
      { path: tokPath },
      { cause: err },
    );
  }

  const idOf = (token: string | undefined, what: string, file: string): number | undefined => {
    if (token === undefined) return undefined;
    const id = tok.token_to_id(token);
    if (id === undefined)
      throw new ConfigError(`${file}: ${what} ${JSON.stringify(token)} is not in the vocabulary of ${tokPath}. HINT: fix ${what} in ${file}.`, {
        path: file,
        token,
      });
    return id;
  };

  const bosToken = tokenText(config.bos_token);
  const eosToken = tokenText(config.eos_token);
  const padToken = tokenText(config.pad_token);
  const eos = new Set<number>();
  const eosTokId = idOf(eosToken, 'eos_token', cfgPath);
  if (eosTokId !== undefined) eos.add(eosTokId);
  const genEos = gen?.eos_token_id;
  for (const v of genEos === undefined || genEos === null ? [] : Array.isArray(genEos) ? genEos : [genEos]) {
    if (!Number.isInteger(v) || (v as number) < 0)
      throw new ConfigError(
        `${genPath}: eos_token_id must be a non-negative integer or a list of them, got ${JSON.stringify(genEos)}. HINT: fix generation_config.json.`,
        { path: genPath },
      );
    eos.add(v as number);
  }
  if (eos.size === 0)
    throw new ConfigError(
      `No EOS token: neither ${cfgPath} (eos_token) nor ${genPath} (eos_token_id) names one. HINT: set eos_token in tokenizer_config.json.`,
      { path: cfgPath },
    );
  const eosIds = [...eos].sort((a, b) => a - b);
  const genPad = gen?.pad_token_id;
  const padId = idOf(padToken, 'pad_token', cfgPath) ?? (Number.isInteger(genPad) ? (genPad as number) : eosIds[0]!);

  const special = new Set<number>([...tok.get_added_tokens_decoder()].filter(([, t]) => t.special).map(([id]) => id));
  const vocabSize = tok.get_vocab(true).size;
  const chatTemplate = typeof config.chat_template === 'string' ? config.chat_template : undefined;

  return {
    dir,
    config,
    chatTemplate,
    bosToken,
    eosToken,
    padToken,
    eosIds,
    padId,
    vocabSize,
    encode: (text, opts = {}) => tok.encode(text, { add_special_tokens: opts.addSpecialTokens ?? false }).ids,
    // The library refuses an empty list; an empty completion (EOS first) is the empty text.
    decode: (ids, opts = {}) => (ids.length === 0 ? '' : tok.decode([...ids], { skip_special_tokens: opts.skipSpecialTokens ?? false })),
    tokenToId: (t) => tok.token_to_id(t),
    idToToken: (id) => tok.id_to_token(id),
    isSpecial: (id) => special.has(id),
    decodeCompletion: (ids) => {
      const at = ids.findIndex((id) => eos.has(id));
      const kept = at < 0 ? [...ids] : ids.slice(0, at + 1);
      const body = at < 0 ? kept : kept.slice(0, -1);
      return { text: body.length ? tok.decode(body, { skip_special_tokens: true }) : '', ids: kept, finishReason: at < 0 ? 'length' : 'stop' };
    },
  };
}
