/**
 * Command-line flags of a GRPO entry (`launch ... examples/grpo.ts [flags]`), parsed
 * with commander into a config over an optional JSON file (`--config`), then validated
 * by the zod schema (config.ts). Bad flags are a ConfigError with the usage.
 */
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { Command, CommanderError } from 'commander';
import { ConfigError } from '../runtime/errors.js';
import type { RankContext } from '../runtime/actor-system/rank-context.js';
import type { GrpoConfigInput } from './config.js';
import { checkGrpoConfig, runGrpo, type GrpoSummary } from './driver.js';

const num = (flag: string) => (v: string) => {
  const x = Number(v);
  if (v.trim() === '' || !Number.isFinite(x)) throw new ConfigError(`${flag} expects a number but received ${JSON.stringify(v)}.`);
  return x;
};

function program(): Command {
  return new Command('grpo')
    .option('--config <file>', 'JSON config file (flags override it)')
    .option(
      '--mode <mode>',
      'auto (default: colocate when every rank has a core of its own, else server), server (trainer and engine on separate ranks) or colocate',
    )
    .option('--model <dir>', 'Hugging Face model folder (config.json; weights, tokenizer, generation_config.json)')
    .option('--init <how>', "initial weights: auto (the folder's checkpoint when it has one), checkpoint or seed")
    .option('--dataset <file>', 'prompts: a .jsonl or .parquet file with a prompt or messages column (default: the digit task)')
    .option('--eval-dataset <file>', 'held-out prompts for --eval-every')
    .option('--eval-every <n>', 'evaluate on held-out prompts every n steps', num('--eval-every'))
    .option('--reward <module#export[:weight]>', 'a reward function (repeatable), or builtin:NAME[:weight]', (v: string, acc: string[] = []) => [...acc, v])
    .option('--tokenizer <dir>', 'tokenizer folder (default: the model folder)')
    .option('--max-prompt-length <n>', 'prompt tokens at most (longer prompts are dropped)', num('--max-prompt-length'))
    .option('--save <dir>', 'after the last step, write the model as a Hugging Face folder here')
    .option('--save-merged', 'LoRA runs: save the merged model instead of the PEFT adapter folder')
    .option('--save-dtype <dtype>', "float32, bfloat16 or float16 (default: the input checkpoint's)")
    .option('--mask-truncated-completions', 'completions cut by --max-new-tokens take no loss')
    .option('--set <key=json>', 'any config key, e.g. --set lossType=\'"grpo"\' --set dataset.epochs=2 (repeatable)', (v: string, acc: string[] = []) => [
      ...acc,
      v,
    ])
    .option('--steps <n>', 'GRPO steps', num('--steps'))
    .option('--seed <n>', 'seed', num('--seed'))
    .option('--strategy <s>', 'trainer strategy: fsdp2 or megatron')
    .option('--trainer-ranks <n>', 'trainer ranks in server mode (default half)', num('--trainer-ranks'))
    .option('--trainer-tp <n>', 'trainer tensor parallel (megatron)', num('--trainer-tp'))
    .option('--engine-tp <n>', 'engine tensor parallel: 1, 2 or 4', num('--engine-tp'))
    .option('--rollout-dtype <dtype>', "rollout engine weights: float32 (default) or bfloat16 (matmul weights in bf16, half the sync's bytes)")
    .option('--trainer-dtype <dtype>', 'trainer compute: float32 (default) or bfloat16 (bf16 matmul weights and activations, fp32 master weights and AdamW)')
    .option('--prompts <n>', 'prompts per step', num('--prompts'))
    .option('--generations <n>', 'samples per prompt', num('--generations'))
    .option('--max-new-tokens <n>', 'tokens generated per sample at most', num('--max-new-tokens'))
    .option('--temperature <t>', 'sampling temperature', num('--temperature'))
    .option('--lr <x>', 'learning rate', num('--lr'))
    .option('--sft-warmup <n>', 'supervised warm-up steps before GRPO', num('--sft-warmup'))
    .option('--beta <x>', 'KL coefficient to the initial policy (0 = off)', num('--beta'))
    .option('--entropy-coeff <x>', 'entropy bonus: loss -= x * exact policy entropy, aggregated as the loss type (0 = off)', num('--entropy-coeff'))
    .option('--bucket <bytes>', 'weight-sync bucket size, e.g. 512MiB')
    .option('--verify', 'verify every weight sync (checksums + probe log-probs)')
    .option('--checkpoint-dir <dir>', 'save checkpoints here')
    .option('--checkpoint-every <n>', 'checkpoint every n steps', num('--checkpoint-every'))
    .option('--resume', 'resume from the newest checkpoint in --checkpoint-dir')
    .option('--log <file>', 'JSONL run log (header line, then one line per step)')
    .option('--log-overwrite', 'replace an existing --log file (a new run refuses one; --resume appends)')
    .option('--no-progress', 'plain lines instead of the progress bar')
    .helpOption(false)
    .option('-h, --help', 'print this help and exit')
    .exitOverride()
    .configureOutput({ writeOut: () => undefined, writeErr: () => undefined });
}

/** The flags' usage text. */
export function grpoUsage(): string {
  return program().helpInformation();
}

/** Flags (and --config) → config input over `defaults`. */
export function grpoConfigFromArgs(args: readonly string[], defaults: Partial<GrpoConfigInput> = {}): GrpoConfigInput {
  const cmd = program();
  try {
    cmd.parse([...args], { from: 'user' });
  } catch (e) {
    if (e instanceof CommanderError) {
      if (e.code === 'commander.helpDisplayed') throw new ConfigError(cmd.helpInformation());
      throw new ConfigError(`GRPO flags: ${e.message.replace(/^error: /, '')}. HINT: run with --help to list the flags.`);
    }
    throw e;
  }
  const o = cmd.opts<Record<string, unknown>>();
  let file: Record<string, unknown> = {};
  if (typeof o.config === 'string') {
    try {
      file = JSON.parse(readFileSync(o.config, 'utf8')) as Record<string, unknown>;
    } catch (e) {
      throw new ConfigError(`--config ${o.config}: ${(e as Error).message}`);
    }
  }
  // "$schema" names the file's JSON Schema for editors (`ascent schema grpo`); it is not a setting.
  delete file.$schema;
  const c: Record<string, unknown> = { ...defaults, ...file };
  const set = (key: string, v: unknown) => {
    if (v !== undefined) c[key] = v;
  };
  const sub = (key: string, field: string, v: unknown) => {
    if (v !== undefined) c[key] = { ...((c[key] as object) ?? {}), [field]: v };
  };
  set('mode', o.mode);
  set('model', o.model);
  set('init', o.init);
  sub('dataset', 'path', o.dataset);
  sub('dataset', 'maxPromptLength', o.maxPromptLength);
  sub('eval', 'dataset', o.evalDataset);
  sub('eval', 'every', o.evalEvery);
  sub('tokenizer', 'path', o.tokenizer);
  if (Array.isArray(o.reward)) c.rewards = (o.reward as string[]).map(parseRewardFlag);
  if (o.maskTruncatedCompletions) c.maskTruncatedCompletions = true;
  sub('save', 'dir', o.save);
  sub('save', 'dtype', o.saveDtype);
  if (o.saveMerged) sub('save', 'merged', true);
  set('steps', o.steps);
  set('seed', o.seed);
  sub('trainer', 'strategy', o.strategy);
  sub('trainer', 'ranks', o.trainerRanks);
  sub('trainer', 'tp', o.trainerTp);
  sub('engine', 'tp', o.engineTp);
  sub('engine', 'dtype', o.rolloutDtype);
  sub('trainer', 'dtype', o.trainerDtype);
  set('promptsPerStep', o.prompts);
  set('numGenerations', o.generations);
  set('maxNewTokens', o.maxNewTokens);
  set('temperature', o.temperature);
  if (o.lr !== undefined) c.optimizer = { ...((c.optimizer as object) ?? {}), lr: o.lr };
  set('beta', o.beta);
  set('entropyCoeff', o.entropyCoeff);
  sub('sftWarmup', 'steps', o.sftWarmup);
  sub('sync', 'bucketBytes', o.bucket);
  if (o.verify) sub('sync', 'verify', true);
  if (o.checkpointDir !== undefined || o.checkpointEvery !== undefined) {
    c.checkpoint = {
      ...((c.checkpoint as object) ?? {}),
      ...(o.checkpointDir !== undefined ? { dir: o.checkpointDir } : {}),
      ...(o.checkpointEvery !== undefined ? { every: o.checkpointEvery } : {}),
    };
  }
  if (o.resume) c.resume = true;
  set('log', o.log);
  if (o.logOverwrite) c.logOverwrite = true;
  if (o.progress === false) c.progress = false;
  for (const kv of (o.set as string[] | undefined) ?? []) setPath(c, kv);
  return c as GrpoConfigInput;
}

/** `module#export[:weight]` or `builtin:NAME[:weight]` → a reward spec. */
function parseRewardFlag(v: string): Record<string, unknown> {
  const weighted = /^(.*?)(?::(-?[\d.eE+-]+))?$/.exec(v)!;
  const body = weighted[1]!,
    weight = weighted[2] === undefined ? 1 : Number(weighted[2]);
  if (!Number.isFinite(weight)) throw new ConfigError(`--reward ${v}: the weight after ':' must be a number.`);
  if (body.startsWith('builtin:')) return { builtin: body.slice(8), weight };
  const at = body.lastIndexOf('#');
  if (at <= 0 || at === body.length - 1)
    throw new ConfigError(`--reward ${JSON.stringify(v)}: expected MODULE#EXPORT[:WEIGHT] (e.g. ./rewards.mjs#exact:1) or builtin:NAME[:WEIGHT].`);
  return { module: body.slice(0, at), export: body.slice(at + 1), weight };
}

/** `a.b.c=JSON` (a bare word that is not JSON is a string) into `c`. */
function setPath(c: Record<string, unknown>, kv: string): void {
  const eq = kv.indexOf('=');
  if (eq <= 0) throw new ConfigError(`--set ${JSON.stringify(kv)}: expected KEY=VALUE, e.g. --set lossType=grpo or --set dataset.epochs=2.`);
  const path = kv.slice(0, eq).split('.');
  const raw = kv.slice(eq + 1);
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    value = raw;
  }
  let at = c;
  for (const p of path.slice(0, -1)) {
    const next = at[p];
    if (next !== undefined && (typeof next !== 'object' || next === null || Array.isArray(next))) throw new ConfigError(`--set ${kv}: ${p} is not an object.`);
    at = at[p] = { ...((next as Record<string, unknown> | undefined) ?? {}) };
  }
  at[path.at(-1)!] = value;
}

/**
 * An entry's `validateArgs` for `launch` (see examples/grpo.ts): the flags and config
 * checked once in the launcher process before any rank starts, so a bad flag is one
 * line and exit 2 at once; `--help` resolves to the usage, which launch prints (exit 0)
 * without starting any rank.
 */
export async function checkGrpoArgs(
  a: { args: readonly string[]; worldSize: number; localWorldSize?: number },
  defaults: Partial<GrpoConfigInput> = {},
): Promise<{ stdout: string } | undefined> {
  if (a.args.includes('--help') || a.args.includes('-h')) return { stdout: grpoUsage() };
  const host = { ranksInProcess: a.localWorldSize ?? a.worldSize, cores: availableParallelism() };
  await checkGrpoConfig(grpoConfigFromArgs(a.args, defaults), a.worldSize, true, host);
  return undefined;
}

/**
 * Entry for `launch`: flags from ctx.args over `defaults`, then the GRPO loop. `--help` that
 * reaches the ranks (an entry without validateArgs): rank 0 prints the usage, every rank exits 0.
 */
export async function grpoMain(ctx: RankContext, defaults: Partial<GrpoConfigInput> = {}): Promise<GrpoSummary | null> {
  if (ctx.args.includes('--help') || ctx.args.includes('-h')) {
    ctx.log.leader(grpoUsage());
    return null;
  }
  return runGrpo(ctx, grpoConfigFromArgs(ctx.args, defaults));
}
