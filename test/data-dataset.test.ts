import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { parquetWriteBuffer } from 'hyparquet-writer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplate, PromptDataset, kvCacheTokensFor, loadTokenizer, type LoadedTokenizer } from '../src/data/index.js';
import { ConfigError } from '../src/runtime/errors.js';
import { makeQwen3Folder } from './fixtures/data/qwen3-folder.js';

let model: string;
let work: string;
let tok: LoadedTokenizer;
let chat: ChatTemplate;

beforeAll(() => {
  model = makeQwen3Folder();
  work = mkdtempSync(join(tmpdir(), 'ascent-ds-'));
  tok = loadTokenizer(model);
  chat = ChatTemplate.fromTokenizer(tok);
});
afterAll(() => {
  rmSync(model, { recursive: true, force: true });
  rmSync(work, { recursive: true, force: true });
});

function jsonl(name: string, rows: unknown[]): string {
  const p = join(work, name);
  writeFileSync(p, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  return p;
}
const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i}`).join(' ');

describe('JSONL prompt datasets', () => {
  it('prompt strings as is, messages through the chat template; other columns kept', async () => {
    const path = jsonl('mixed.jsonl', [
      { prompt: 'What is 2+2?', answer: '4', level: 1 },
      { messages: [{ role: 'user', content: '你好 🎉' }], answer: 'hi', level: 2 },
    ]);
    const ds = await PromptDataset.load(
      { path, promptsPerStep: 1, shuffle: false },
      { tokenizer: tok, chatTemplate: chat, chatTemplateKwargs: { enable_thinking: false } },
    );
    const [a, b] = ds.samples;
    expect(a!.prompt).toBe('What is 2+2?');
    expect(a!.promptIds).toEqual(tok.encode('What is 2+2?'));
    expect(a!.columns).toEqual({ answer: '4', level: 1 });
    expect(b!.prompt).toBe('<|im_start|>user\n你好 🎉<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
    expect(b!.promptIds[0]).toBe(151644);
    expect(b!.columns).toEqual({ answer: 'hi', level: 2 });
    expect(b!.at).toBe(2);
    expect(ds.stats.maxPromptTokens).toBe(Math.max(a!.promptIds.length, b!.promptIds.length));
    expect(ds.stats).toMatchObject({ rows: 2, kept: 2, filtered: 0, truncated: 0 });
    expect(kvCacheTokensFor(ds.stats, 64)).toBe(ds.stats.maxPromptTokens + 64);
    expect(() => kvCacheTokensFor(ds.stats, 0)).toThrow(/maxCompletionLength must be a positive integer/);
  });

  it('maxPromptLength: filter drops, truncate keeps the last tokens (left truncation)', async () => {
    const rows = [{ prompt: words(3) }, { prompt: words(40) }, { prompt: words(5) }];
    const path = jsonl('long.jsonl', rows);
    const limit = tok.encode(words(5)).length;
    const f = await PromptDataset.load({ path, max_prompt_length: limit, promptsPerStep: 1, shuffle: false }, { tokenizer: tok });
    expect(f.samples.map((s) => s.at)).toEqual([1, 3]);
    expect(f.stats).toMatchObject({ rows: 3, kept: 2, filtered: 1, maxPromptTokens: limit });
    const t = await PromptDataset.load({ path, maxPromptLength: limit, overlong: 'truncate', promptsPerStep: 1, shuffle: false }, { tokenizer: tok });
    const full = tok.encode(words(40));
    expect(t.samples[1]!.promptIds).toEqual(full.slice(full.length - limit));
    expect(t.samples[1]!.truncated).toBe(true);
    expect(t.samples[1]!.prompt.endsWith(' w39')).toBe(true);
    expect(t.stats).toMatchObject({ kept: 3, truncated: 1, maxPromptTokens: limit });
  });

  it('seeded shuffle, epochs and batches', async () => {
    const path = jsonl(
      'ten.jsonl',
      Array.from({ length: 10 }, (_, i) => ({ prompt: `p${i}`, id: i })),
    );
    const load = (extra: object) => PromptDataset.load({ path, promptsPerStep: 3, epochs: 2, ...extra }, { tokenizer: tok });
    const a = await load({ seed: 1 });
    const b = await load({ seed: 1 });
    const c = await load({ seed: 2 });
    expect(a.stepsPerEpoch).toBe(3);
    expect(a.totalSteps).toBe(6);
    const ids = (ds: PromptDataset) => [...ds.batches()].map((x) => x.samples.map((s) => s.columns.id as number));
    const ba = ids(a);
    expect(ba).toEqual(ids(b));
    expect(ba).not.toEqual(ids(c));
    expect(ba.length).toBe(6);
    for (const bt of ba) expect(bt.length).toBe(3);
    // Each epoch is a permutation: 9 distinct of the 10 rows, and the two epochs differ in order.
    expect(new Set(ba.slice(0, 3).flat()).size).toBe(9);
    expect(a.epochOrder(0)).not.toEqual(a.epochOrder(1));
    expect([...a.epochOrder(0)].sort((x, y) => x - y)).toEqual([...Array(10).keys()]);
    expect([...a.batches(4)].map((x) => x.step)).toEqual([4, 5]);
    expect([...a.batches(4)][0]!.epoch).toBe(1);
    const plain = await load({ shuffle: false, keepLastBatch: true, epochs: 1 });
    expect(ids(plain)).toEqual([[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]);
  });

  it('errors name the file, line/row and column', async () => {
    const bad = join(work, 'bad.jsonl');
    writeFileSync(bad, '{"prompt":"a"}\n{oops\n');
    await expect(PromptDataset.load({ path: bad, promptsPerStep: 1 }, { tokenizer: tok })).rejects.toThrow(/bad\.jsonl line 2: not valid JSON/);
    const none = jsonl('none.jsonl', [{ prompt: 'a' }, { question: 'b' }]);
    await expect(PromptDataset.load({ path: none, promptsPerStep: 1 }, { tokenizer: tok })).rejects.toThrow(
      /none\.jsonl row 2: has neither a `prompt` nor a `messages` column \(columns: question\)/,
    );
    const both = jsonl('both.jsonl', [{ prompt: 'a', messages: [] }]);
    await expect(PromptDataset.load({ path: both, promptsPerStep: 1 }, { tokenizer: tok })).rejects.toThrow(/both\.jsonl row 1: has both/);
    const msg = jsonl('msg.jsonl', [{ messages: [{ role: 'user' }] }]);
    await expect(PromptDataset.load({ path: msg, promptsPerStep: 1 }, { tokenizer: tok, chatTemplate: chat })).rejects.toThrow(
      /msg\.jsonl row 1 column messages\[0\]: expected \{ role: string, content: string \}/,
    );
    const noTpl = jsonl('notpl.jsonl', [{ messages: [{ role: 'user', content: 'x' }] }]);
    await expect(PromptDataset.load({ path: noTpl, promptsPerStep: 1 }, { tokenizer: tok })).rejects.toThrow(/no chat template was given/);
    await expect(PromptDataset.load({ path: join(work, 'missing.jsonl') }, { tokenizer: tok })).rejects.toThrow(/missing\.jsonl does not exist/);
    await expect(PromptDataset.load({ path: join(work, 'x.csv') }, { tokenizer: tok })).rejects.toThrow(ConfigError);
    await expect(PromptDataset.load({ path: noTpl, promptsPerStep: 0 }, { tokenizer: tok })).rejects.toThrow(/Invalid dataset config: promptsPerStep/);
    const few = jsonl('few.jsonl', [{ prompt: 'a' }]);
    await expect(PromptDataset.load({ path: few, promptsPerStep: 4 }, { tokenizer: tok })).rejects.toThrow(/fewer than promptsPerStep=4/);
    await expect(
      PromptDataset.load({ path: few, promptsPerStep: 1, maxPromptLength: 1, overlong: 'filter' }, { tokenizer: { encode: () => [1, 2], decode: () => '' } }),
    ).rejects.toThrow(/all 1 rows are longer than maxPromptLength=1/);
  });
});

describe('Parquet prompt datasets', () => {
  function writeParquet(name: string, codec: 'SNAPPY' | 'UNCOMPRESSED' | 'GZIP'): string {
    const buf = parquetWriteBuffer({
      codec,
      compressors: { GZIP: (b: Uint8Array) => new Uint8Array(gzipSync(b)) },
      columnData: [
        { name: 'prompt', data: ['Solve 1+1', '日本語 prompt', 'emoji 🚀'], type: 'STRING' },
        { name: 'answer', data: ['2', 'x', 'y'], type: 'STRING' },
        { name: 'level', data: [1, 2, 3], type: 'INT32' },
        { name: 'big', data: [1n, 2n, 9007199254740993n], type: 'INT64' },
        { name: 'score', data: [0.5, 1.5, 2.5], type: 'DOUBLE' },
      ],
    });
    const p = join(work, name);
    writeFileSync(p, new Uint8Array(buf));
    return p;
  }

  it.each(['SNAPPY', 'UNCOMPRESSED', 'GZIP'] as const)('reads %s: prompt column and every other column', async (codec) => {
    const path = writeParquet(`d-${codec}.parquet`, codec);
    const ds = await PromptDataset.load({ path, promptsPerStep: 3, shuffle: false }, { tokenizer: tok });
    expect(ds.samples.map((s) => s.prompt)).toEqual(['Solve 1+1', '日本語 prompt', 'emoji 🚀']);
    expect(ds.samples[1]!.promptIds).toEqual(tok.encode('日本語 prompt'));
    expect(ds.samples.map((s) => s.columns)).toEqual([
      { answer: '2', level: 1, big: 1, score: 0.5 },
      { answer: 'x', level: 2, big: 2, score: 1.5 },
      { answer: 'y', level: 3, big: '9007199254740993', score: 2.5 },
    ]);
    expect(ds.samples[2]!.at).toBe(3);
    expect(ds.stats.maxPromptTokens).toBe(Math.max(...ds.samples.map((s) => s.promptIds.length)));
  });

  it('a corrupt Parquet file is a clear error naming it', async () => {
    const p = join(work, 'corrupt.parquet');
    writeFileSync(p, 'not parquet at all');
    await expect(PromptDataset.load({ path: p }, { tokenizer: tok })).rejects.toThrow(/corrupt\.parquet: cannot read Parquet/);
  });
});
