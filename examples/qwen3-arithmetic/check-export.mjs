// examples/qwen3-arithmetic/check-export.mjs — loads the folder a run saved (--save) back into a
// rollout engine and answers the held-out prompts greedily, as the run's last evaluation did:
// the same weights give the same text, so the printed accuracy equals that evaluation's.
// Run: node examples/qwen3-arithmetic/check-export.mjs <task folder> <saved folder>
import { join, resolve } from 'node:path';
import {
  ChatTemplate, Device, PromptDataset, RolloutEngine, loadModelConfig, loadTokenizer, readHfWeights,
} from 'ascent/internal';

const [task, saved] = process.argv.slice(2).map((p) => resolve(p));
if (!task || !saved) throw new Error('usage: check-export.mjs <task folder> <saved folder>');
const tok = loadTokenizer(saved);
const ds = await PromptDataset.load({ path: join(task, 'eval.jsonl'), shuffle: false, promptsPerStep: 1, keepLastBatch: true }, {
  tokenizer: tok, chatTemplate: ChatTemplate.fromTokenizer(tok), chatTemplateKwargs: { enable_thinking: false },
});
const cfg = loadModelConfig(join(saved, 'config.json'));
const prompts = ds.samples.slice(0, 32);
const engine = RolloutEngine.create(cfg, { device: Device.get(0), maxBatch: prompts.length, maxSeqLen: ds.stats.maxPromptTokens + 8 });
const reload = engine.beginReload();
reload.load(await readHfWeights(cfg, saved));
reload.finish();
const [eos, ...stop] = tok.eosIds;
const out = await engine.generate(prompts.map((s) => s.promptIds), { maxTokens: 4, temperature: 0, eosTokenId: eos, stopTokenIds: stop });
let right = 0;
out.tokens.forEach((ids, i) => {
  const text = tok.decodeCompletion(ids).text.trim();
  if (text === prompts[i].columns.answer) right++;
  if (i < 4) console.log(`${prompts[i].messages[0].content}${text}   (answer ${prompts[i].columns.answer})`);
});
console.log(`exact ${right}/${prompts.length} = ${(right / prompts.length).toFixed(3)} on the held-out prompts, greedy, from ${saved}`);
