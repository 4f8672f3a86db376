import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplate, PromptDataset, RewardRunner, loadTokenizer } from '../src/data/index.js';
import { TaskPool } from '../src/runtime/actor-system/task-pool.js';
import { REPO_ROOT, makeQwen3Folder } from './fixtures/data/qwen3-folder.js';

let model: string;
let work: string;
let pool: TaskPool;
beforeAll(() => {
  model = makeQwen3Folder();
  work = mkdtempSync(join(tmpdir(), 'ascent-pipe-'));
  pool = new TaskPool({ maxThreads: 2 });
});
afterAll(async () => {
  await pool.close();
  rmSync(model, { recursive: true, force: true });
  rmSync(work, { recursive: true, force: true });
});

describe('dataset → completions → rewards, as the driver will chain them', () => {
  it('columns reach the rewards; completions are decoded at the first EOS', async () => {
    const tok = loadTokenizer(model);
    const path = join(work, 'qa.jsonl');
    const rows = [
      { messages: [{ role: 'user', content: 'Capital of France?' }], answer: 'Paris', topic: 'France' },
      { messages: [{ role: 'user', content: '6 * 7 = ?' }], answer: '42', topic: 'math' },
      { messages: [{ role: 'user', content: '日本の首都は？' }], answer: '東京', topic: '日本' },
    ];
    writeFileSync(path, rows.map((r) => JSON.stringify(r)).join('\n'));
    const ds = await PromptDataset.load({ path, promptsPerStep: 3, seed: 5 }, { tokenizer: tok, chatTemplate: ChatTemplate.fromTokenizer(tok) });
    const [batch] = [...ds.batches()];
    const texts: Record<string, string> = { France: '<answer>Paris</answer> France', math: 'It is \\boxed{41}', 日本: 'Tokyo' };
    const gens = batch!.samples.map((s) => tok.encode(texts[s.columns.topic as string]!).concat(s.columns.topic === 'math' ? [] : [151645, 9707]));
    const decoded = gens.map((g) => tok.decodeCompletion(g));
    const runner = new RewardRunner(pool, {
      rewards: [
        { builtin: 'accuracy', weight: 1 },
        { module: join(REPO_ROOT, 'test', 'fixtures', 'data', 'ts-reward.ts'), export: 'mentionsTopic', weight: 0.25, name: 'topic' },
      ],
    });
    const out = await runner.score({
      prompts: batch!.samples.map((s) => s.prompt),
      promptIds: batch!.samples.map((s) => s.promptIds),
      completions: decoded.map((d) => d.text),
      completionIds: decoded.map((d) => d.ids),
      finishReasons: decoded.map((d) => d.finishReason),
      columns: batch!.samples.map((s) => s.columns),
    });
    const byTopic = (vals: (number | null)[]) => Object.fromEntries(batch!.samples.map((s, i) => [s.columns.topic as string, vals[i]]));
    expect(byTopic(out.perReward['accuracy']!)).toEqual({ France: 1, math: 0, 日本: 0 });
    expect(byTopic(out.perReward['topic']!)).toEqual({ France: 1, math: 0, 日本: 0 });
    expect(byTopic(out.total)).toEqual({ France: 1.25, math: 0, 日本: 0 });
    expect(byTopic(decoded.map((d) => (d.finishReason === 'stop' ? 1 : 0)))).toEqual({ France: 1, math: 0, 日本: 1 });
    expect(decoded.every((d) => !d.text.includes('Hello'))).toBe(true);
  });
});
