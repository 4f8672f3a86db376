/**
 * The GRPO loop under `launch` (SPMD entry, single controller).
 *
 * Every rank forms the groups (one world-wide `comm.split` per group, in the same
 * order everywhere), builds its local actors — TrainerActor on trainer ranks,
 * RolloutActor on engine ranks, the weight-sync coordinator on all — and exposes
 * them. Rank 0 is the controller: per step it
 *   1. generates numGenerations samples per prompt on the engine replicas (Comlink calls),
 *   2. scores them with the rule-based reward in a Piscina pool,
 *   3. computes group-normalised advantages,
 *   4. recomputes the old-policy (and, with beta > 0, reference) log-probs on the trainer,
 *   5. takes one GRPO optimizer step (clipped surrogate, optional KL),
 *   6. syncs the weights to the engines (verified on request),
 * and logs metrics (JSONL, progress display), checkpoints every k steps, and at the
 * end tells every rank to finish. Placement: `server` puts trainers on the first
 * ranks and engines on the rest; `colocate` puts both on every rank, and the engine
 * sleeps (drops weights and KV cache) while the trainer trains, woken by the sync.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { availableParallelism } from 'node:os';
import type { Communicator } from '../runtime/comm/comm.js';
import { ConfigError } from '../runtime/errors.js';
import type { RankContext } from '../runtime/actor-system/rank-context.js';
import { TaskPool } from '../runtime/actor-system/task-pool.js';
import { loadModelConfig } from '../model/config.js';
import { latestCheckpoint, readTrainerState } from '../train/checkpoint.js';
import { modelConfigPath } from '../train/factory.js';
import { TrainerActor } from '../actors/trainer.js';
import type { TrainerConfigInput } from '../train/config.js';
import { RolloutActor } from '../actors/rollout.js';
import { SyncActor, makeWeightSync } from '../actors/sync.js';
import './loss.js'; // registers the 'grpo' loss the trainer actors' lossStep uses
import { groupAdvantages } from './advantages.js';
import { addInformative, trimGroups, type Sampled } from './sampled.js';
import { datasetSource, digitTaskSource, tokenizerDirOf, type PromptItem, type PromptSource } from './prompts.js';
import { RewardRunner } from '../data/rewards.js';
import { parseGrpoConfig, type GrpoConfig, type GrpoConfigInput } from './config.js';
import type { HostShape } from './placement.js';
import { lengthStats, Progress, summaryTable, type StepMetrics } from './metrics.js';
import { checkRunLogTarget, RunLog, runLogMode } from './run-log.js';
import { alignToTargets, assembleRows, buildTrainBatch } from './rollout-batch.js';
import { policyUpdate } from './update.js';
import { StepSync } from './step-sync.js';
import { epochMs, syncInUpdate, UpdateSyncActor } from './update-sync.js';
import type { SyncReport } from '../sync/index.js';
import { totalOptimizerSteps, warmupSteps } from './algorithm-config.js';
import type { LrSchedule } from '../train/lr-schedule.js';
import type { TrainBatch } from '../train/strategy.js';

export interface GrpoSummary {
  steps: StepMetrics[];
  /** Evaluations on the held-out prompts (config `eval`), in step order. */
  evals: Array<{ step: number; rewardMean: number }>;
  /** Step the run started from (> 0 after a resume). */
  startStep: number;
  seconds: number;
}

/** Finishing signal the controller sends to every rank. */
class GrpoControl {
  readonly done: Promise<void>;
  #resolve!: () => void;

  /** `onEnd` runs inside finish/fail, so that the controller's awaited call returns only after it. */
  constructor(private readonly onEnd: () => void = () => undefined) {
    this.done = new Promise((res) => {
      this.#resolve = res;
    });
  }

  finish(): void {
    this.onEnd();
    this.#resolve();
  }

  /** The controller failed: rank 0 reports the error; the other ranks stop quietly. */
  fail(message: string): void {
    this.failure = message;
    this.onEnd();
    this.#resolve();
  }

  failure: string | null = null;
}

interface Roles {
  trainerRanks: number[];
  engineRanks: number[];
  isTrainer: boolean;
  isEngine: boolean;
  replica: number;
  replicas: number;
}

function rolesOf(cfg: GrpoConfig, rank: number, world: number): Roles {
  const all = Array.from({ length: world }, (_, i) => i);
  const t = cfg.mode === 'colocate' ? world : (cfg.trainer.ranks ?? Math.floor(world / 2));
  const trainerRanks = cfg.mode === 'colocate' ? all : all.slice(0, t);
  const engineRanks = cfg.mode === 'colocate' ? all : all.slice(t);
  const e = engineRanks.indexOf(rank);
  return {
    trainerRanks,
    engineRanks,
    isTrainer: trainerRanks.includes(rank),
    isEngine: e >= 0,
    replica: e >= 0 ? Math.floor(e / cfg.engine.tp) : -1,
    replicas: engineRanks.length / cfg.engine.tp,
  };
}

const CALL_MS = 600_000;
/** Seed offset of the held-out evaluation prompts (a stream no training round draws from). */
const EVAL_STREAM = 104_729;

/** The newest checkpoint under `dir` for --resume; a missing or empty folder is a ConfigError. */
export async function resumeCheckpoint(dir: string): Promise<string> {
  const found = await latestCheckpoint(dir);
  if (!found) {
    const why = existsSync(dir) ? 'holds no checkpoint (no `latest` file)' : 'does not exist';
    throw new ConfigError(
      `GRPO: --resume: the checkpoint folder ${JSON.stringify(dir)} ${why}. HINT: pass the --checkpoint-dir of a run that saved a checkpoint (--checkpoint-every N), or drop --resume to start fresh.`,
      { dir },
    );
  }
  return found;
}

/**
 * Everything runGrpo refuses before any heavy initialisation, without starting anything:
 * the config, the model's config.json, the --resume folder (resuming from nothing is an
 * error, not a fresh start) and the run log target (when `checkLog`). ConfigError on bad input.
 */
export async function checkGrpoConfig(input: GrpoConfigInput, worldSize: number, checkLog = true, host?: HostShape) {
  const cfg = parseGrpoConfig(input, worldSize, host);
  const resumeDir = cfg.resume ? await resumeCheckpoint(cfg.checkpoint!.dir) : null;
  const model = loadModelConfig(modelConfigPath(cfg.model));
  if (checkLog && cfg.log) checkRunLogTarget(cfg.log, runLogMode(cfg));
  const source = cfg.dataset
    ? await datasetSource({
        dataset: cfg.dataset,
        ...(cfg.eval?.dataset ? { evalDataset: cfg.eval.dataset } : {}),
        tokenizerDir: tokenizerDirOf(cfg.model, cfg.tokenizer.path),
        addGenerationPrompt: cfg.tokenizer.addGenerationPrompt,
        chatTemplateKwargs: cfg.tokenizer.chatTemplateKwargs,
        promptsPerStep: cfg.promptsPerStep,
        sftColumn: cfg.sftWarmup.column,
      })
    : digitTaskSource(cfg.seed);
  if (source.vocabSize > model.vocabSize) {
    throw new ConfigError(
      `GRPO: the tokenizer has ${source.vocabSize} tokens but the model's vocabulary (vocab_size in config.json) has ${model.vocabSize}. HINT: use the tokenizer that belongs to the model (tokenizer.path).`,
      { tokenizer: source.vocabSize, model: model.vocabSize },
    );
  }
  const init = cfg.init === 'auto' ? (hasWeights(cfg.model) ? 'checkpoint' : 'seed') : cfg.init;
  if (init === 'checkpoint' && !hasWeights(cfg.model)) {
    throw new ConfigError(
      `GRPO: init is 'checkpoint' but ${cfg.model} holds no model.safetensors or model.safetensors.index.json. HINT: point model at a Hugging Face model folder, or use init: 'seed'.`,
      { model: cfg.model },
    );
  }
  return { cfg, resumeDir, model, source, init };
}

/** Whether a model folder (or the folder of a config.json path) holds safetensors weights. */
function hasWeights(model: string): boolean {
  const dir = dirname(modelConfigPath(model));
  return existsSync(join(dir, 'model.safetensors')) || existsSync(join(dir, 'model.safetensors.index.json'));
}

export async function runGrpo(ctx: RankContext, input: GrpoConfigInput): Promise<GrpoSummary | null> {
  // A log the run may not write fails the run now (rank 0 writes it), not after setup.
  const host = { ranksInProcess: ctx.localWorldSize, cores: availableParallelism() };
  const { cfg, resumeDir, model, source, init } = await checkGrpoConfig(input, ctx.worldSize, ctx.rank === 0, host);
  const roles = rolesOf(cfg, ctx.rank, ctx.worldSize);
  const { rank } = ctx;

  // Groups: every rank takes part in every split, in this order.
  const trainerComm: Communicator | null = cfg.mode === 'colocate' ? ctx.comm : await ctx.comm.split(roles.isTrainer ? 0 : null, rank);
  const tpComm = cfg.engine.tp === 1 ? null : await ctx.comm.split(roles.isEngine ? roles.replica : null, rank);
  const syncComm = cfg.mode === 'server' ? await ctx.comm.split(0, rank) : null;

  // Local actors.
  // KV cache rows: the largest batch a replica generates (training rounds, or an evaluation).
  const perReplica = Math.max(
    (cfg.promptsPerStep / roles.replicas) * cfg.numGenerations,
    cfg.eval ? (cfg.eval.prompts / roles.replicas) * cfg.eval.numGenerations : 0,
  );
  const trainer = roles.isTrainer
    ? new TrainerActor(ctx, {
        strategy: cfg.trainer.strategy,
        model: cfg.model,
        init: init === 'checkpoint' ? 'checkpoint' : { seed: cfg.seed },
        tp: cfg.trainer.tp,
        ep: cfg.trainer.ep,
        optimizer: cfg.optimizer,
        clipGradNorm: cfg.clipGradNorm,
        load: cfg.trainer.load,
        dtype: cfg.trainer.dtype,
        ...(cfg.trainer.lora ? { lora: cfg.trainer.lora } : {}),
      } as TrainerConfigInput)
    : null;
  if (trainer) await trainer.setupOn(trainerComm!);
  const rollout = roles.isEngine ? new RolloutActor(ctx) : null;
  // KV cache positions from the data: the longest prompt plus the completion budget.
  rollout?.setupOn(model, tpComm, roles.replica, {
    maxBatch: perReplica,
    maxSeqLen: source.maxPromptTokens + cfg.maxNewTokens + 1,
    dtype: cfg.engine.dtype,
  });

  // Resume (trainer ranks, collective over the trainer group) before the first sync.
  let startStep = 0;
  if (resumeDir) {
    // Trainer ranks learn the step from the checkpoint they load; engine-only ranks read it.
    startStep = trainer ? (await trainer.load(resumeDir)).step : (await readTrainerState(resumeDir)).step;
  }
  const sync = new SyncActor(
    ctx,
    makeWeightSync({ cfg, model, mode: cfg.mode, roles, strategy: trainer?.strategy ?? null, engine: rollout?.engine ?? null, syncComm }),
  );
  // First sync: the engines start from the trainer's (initial or resumed) weights;
  // with LoRA the base goes first, then the (possibly resumed) adapters.
  await sync.sync({ verify: cfg.sync.verify });
  if (cfg.trainer.lora) await sync.sync({ verify: false, adapterOnly: true });

  // Expose the actors only now: the controller must not reach an engine whose first
  // sync has not finished on its own rank (a colocated megatron sync has no collective
  // that would hold rank 0 back until every rank wrote its weights).
  // Taken off again when the run ends, so that a later run in the same world can expose its
  // own. On the other ranks that happens inside the controller's awaited `finish` call: once
  // rank 0's run returns, no rank still exposes this run's actors to the next run's controller.
  const exposed: string[] = [];
  const expose = (name: string, obj: object) => {
    ctx.actors.expose(name, obj);
    exposed.push(name);
  };
  const unexposeAll = () => {
    for (const name of exposed.splice(0)) ctx.actors.unexpose(name);
  };
  const control = new GrpoControl(unexposeAll);
  if (trainer) expose('trainer', trainer);
  if (trainer) expose('grpo-update', new UpdateSyncActor(trainer, sync, cfg.mode === 'colocate' ? rollout : null));
  if (rollout) expose('rollout', rollout);
  expose('sync', sync);
  expose('grpo-control', control);

  if (rank !== 0) {
    // Stopped by the world (another rank failed, a peer process died, a signal): end quietly.
    // That failure is the one to report; an error of our own here could arrive at the launcher
    // first and be named the culprit of a run it did not break.
    let onStop!: () => void;
    const stopped = new Promise<'stopped'>((res) => {
      onStop = () => res('stopped');
      if (ctx.signal.aborted) res('stopped');
      else ctx.signal.addEventListener('abort', onStop, { once: true });
    });
    try {
      const how = await Promise.race([control.done.then(() => 'done' as const), stopped]);
      if (how === 'stopped') ctx.log.info(`rank ${rank}: stopped while waiting for the GRPO controller (${String(ctx.signal.reason ?? 'abort')}).`);
      else if (control.failure) ctx.log.info(`stopping: the GRPO controller (rank 0) failed: ${control.failure}`);
    } finally {
      ctx.signal.removeEventListener('abort', onStop);
      unexposeAll();
      sync.release();
      trainer?.shutdown();
      rollout?.shutdown();
    }
    return null;
  }
  try {
    // A controller failing while engine ranks wait in a step's sync aborts the sync communicator (step-sync.ts).
    return await controller(ctx, cfg, roles, startStep, source, (reason) => syncComm?.abort(reason));
  } catch (e) {
    const controls = await ctx.actors.mesh<GrpoControl>('grpo-control', undefined, { timeoutMs: CALL_MS });
    for (const r of controls.ranks)
      if (r !== 0)
        controls
          .ref(r)
          .invoke('fail', [(e as Error).message])
          .catch(() => undefined);
    throw e;
  } finally {
    unexposeAll();
    sync.release();
    trainer?.shutdown();
    rollout?.shutdown();
  }
}

async function controller(
  ctx: RankContext,
  cfg: GrpoConfig,
  roles: Roles,
  startStep: number,
  source: PromptSource,
  abortSync: (reason: string) => void,
): Promise<GrpoSummary> {
  const opts = { timeoutMs: CALL_MS };
  const trainers = await ctx.actors.mesh<TrainerActor>('trainer', roles.trainerRanks, opts);
  const rollouts = await ctx.actors.mesh<RolloutActor>('rollout', roles.engineRanks, opts);
  const syncs = await ctx.actors.mesh<SyncActor>('sync', undefined, opts);
  const controls = await ctx.actors.mesh<GrpoControl>('grpo-control', undefined, opts);
  const stepSync = new StepSync(syncs, roles.trainerRanks, abortSync, CALL_MS);
  const updaters = await ctx.actors.mesh<UpdateSyncActor>('grpo-update', roles.trainerRanks, opts);
  const pool = new TaskPool({ maxThreads: 1 });
  const rewardFns = new RewardRunner(pool, { rewards: cfg.rewards ?? [{ builtin: 'reverse_digits' }], timeoutMs: cfg.rewardTimeoutMs });
  const log = cfg.log ? RunLog.open(cfg.log, { mode: runLogMode(cfg), config: cfg, startStep }) : null;
  const progress = new Progress(cfg.steps, process.stderr, cfg.progress);
  const metrics: StepMetrics[] = [];
  const evals: Array<{ step: number; rewardMean: number }> = [];
  const t0 = Date.now();
  const G = cfg.numGenerations;
  const trainerDp = roles.trainerRanks.length / cfg.trainer.tp;
  const schedule: LrSchedule = {
    kind: cfg.lrScheduler.type,
    lr: cfg.optimizer.lr,
    warmupSteps: warmupSteps(cfg),
    totalSteps: totalOptimizerSteps(cfg),
    ...(cfg.lrScheduler.minLr !== undefined ? { minLr: cfg.lrScheduler.minLr } : {}),
  };
  // A colocated engine sleeps while the trainer trains: level 2 (drop weights) for full
  // syncs, level 1 (keep base weights on the host) when only LoRA adapters are sent.
  const adapterOnly = cfg.trainer.lora !== undefined;
  const sleepLevel = cfg.mode === 'colocate' ? (adapterOnly ? 1 : 2) : null;
  if (startStep === 0 && cfg.sftWarmup.steps > 0) {
    const w = cfg.sftWarmup;
    let first = 0,
      last = 0;
    for (let i = 0; i < w.steps; i++) {
      const [r] = await trainers.call('trainStep', source.sft(i, w.batch), { lr: w.lr });
      if (i === 0) first = r!.loss;
      last = r!.loss;
    }
    await syncs.call('sync', { verify: cfg.sync.verify });
    if (cfg.trainer.lora) await syncs.call('sync', { verify: false, adapterOnly: true });
    ctx.log.info(`SFT warm-up: ${w.steps} steps, loss ${first.toFixed(3)} -> ${last.toFixed(3)}`);
  }
  // The KL reference: the policy as RL starts (after the warm-up; on resume, the resumed policy).
  // A resumed run restores the reference it started with (saved beside the checkpoints).
  const refDir = cfg.checkpoint ? join(cfg.checkpoint.dir, 'reference') : null;
  if (cfg.beta > 0) {
    const restored = startStep > 0 && refDir ? (await trainers.call('loadReference', refDir))[0] : false;
    if (!restored) await trainers.call('setupReference');
  }
  // promptsPerStep prompts (round 0: the run's prompt stream; later rounds: a stream of their own), G samples each, scored.
  const sampleRound = (step: number, round: number, spent: { generate: number; reward: number }): Promise<Sampled> =>
    sample(source.train(step, round, cfg.promptsPerStep), G, { temperature: cfg.temperature, seed: cfg.seed * 1_000_003 + step * 97 + 7_919 * round }, spent);
  const [eosTokenId, ...stopTokenIds] = source.stopIds;
  // `items` split evenly over the engine replicas (a multiple of them), each sampled n times, decoded and scored.
  const sample = async (
    items: PromptItem[],
    n: number,
    how: { temperature: number; seed: number },
    spent?: { generate: number; reward: number },
  ): Promise<Sampled> => {
    const t0 = performance.now();
    const perReplica = items.length / roles.replicas;
    const rows = items.flatMap((p) => Array.from({ length: n }, () => p));
    const outs = await Promise.all(
      roles.engineRanks.map((er, i) => {
        const r = Math.floor(i / cfg.engine.tp);
        const mine = rows.slice(r * perReplica * n, (r + 1) * perReplica * n).map((p) => p.ids);
        return rollouts
          .ref(er)
          .invoke(
            'generate',
            [mine, { maxTokens: cfg.maxNewTokens, temperature: how.temperature, topK: cfg.topK, topP: cfg.topP, seed: how.seed + r, eosTokenId, stopTokenIds }],
            opts,
          );
      }),
    );
    const out: Sampled = { prompts: rows.map((p) => p.ids), completions: [], engineLogprobs: [], rewards: [], finishReasons: [] };
    for (let r = 0; r < roles.replicas; r++) {
      const o = outs[r * cfg.engine.tp]!;
      out.completions.push(...o.tokens);
      out.engineLogprobs.push(...o.logprobs);
    }
    const t1 = performance.now();
    const decoded = out.completions.map((c) => source.decode(c));
    out.finishReasons = decoded.map((d) => d.finishReason);
    const scored = await rewardFns.score({
      prompts: rows.map((p) => p.text),
      promptIds: out.prompts,
      completions: decoded.map((d) => d.text),
      completionIds: out.completions,
      finishReasons: out.finishReasons,
      columns: rows.map((p) => p.columns),
    });
    out.rewards = scored.total;
    out.rewardSummary = scored.summary;
    if (spent) {
      spent.generate += (t1 - t0) / 1000;
      spent.reward += (performance.now() - t1) / 1000;
    }
    return out;
  };
  progress.start(startStep);
  try {
    for (let step = startStep + 1; step <= cfg.steps; step++) {
      const seconds = { generate: 0, reward: 0, logprob: 0, train: 0, sync: 0 };
      let t = performance.now();
      const lap = (k: keyof typeof seconds) => {
        const now = performance.now();
        seconds[k] += (now - t) / 1000;
        t = now;
      };
      // 1-2. Sample numGenerations completions per prompt on the engine replicas and score them.
      // Dynamic sampling (DAPO) drops the groups whose rewards all agree (advantage 0 for every
      // sample: nothing to learn) and samples more prompts, up to maxRounds extra rounds, to refill.
      const first = await sampleRound(step, 0, seconds);
      const rewards = first.rewards;
      let kept = first;
      let rounds = 1,
        droppedGroups = 0;
      if (cfg.dynamicSampling) {
        let r = addInformative(null, first, G);
        droppedGroups += r.flat;
        while (r.kept.rewards.length / G < cfg.promptsPerStep && rounds <= cfg.dynamicSampling.maxRounds) {
          r = addInformative(r.kept, await sampleRound(step, rounds++, seconds), G);
          droppedGroups += r.flat;
        }
        kept = trimGroups(r.kept, cfg.promptsPerStep, cfg.stepsPerGeneration * cfg.gradientAccumulationSteps * trainerDp, G);
      }
      const { prompts, completions, engineLogprobs } = kept;
      t = performance.now(); // generation and rewards were timed inside the rounds
      if (kept.rewards.length === 0) {
        // Every group was flat, even after resampling: no update, no sync (and no sleep) this step.
        const mean = rewards.reduce((x, y) => x + y, 0) / rewards.length;
        ctx.log.info(`step ${step}: every sampled group has equal rewards (${rounds} rounds); no update`);
        const m: StepMetrics = {
          step,
          lr: 0,
          rewardMean: mean,
          rewardStd: 0,
          rewards: rewardMeans(first),
          completionLength: lengthStats(first.completions),
          kl: 0,
          clipFraction: 0,
          entropy: 0,
          loss: 0,
          gradNorm: 0,
          responseTokens: 0,
          seconds,
          syncBytes: 0,
          syncGBs: 0,
        };
        metrics.push(m);
        log?.step({ ...m, optimizerSteps: 0, samplingRounds: rounds, droppedGroups, time: new Date().toISOString() });
        progress.update(m, (line) => ctx.log.info(line));
        continue;
      }
      if (sleepLevel) await rollouts.call('sleep', sleepLevel as 1 | 2);
      lap('generate'); // the engine's sleep
      // This step's weight sync: the probe rows (one per trainer data-parallel rank, the
      // strategies split batches evenly) are known once the samples are.
      const probeRows = roles.trainerRanks.length / cfg.trainer.tp;
      const probe = cfg.sync.verify ? { ids: prompts.slice(0, probeRows).map((p, i) => [...p, ...completions[i]!]), temperature: cfg.temperature } : undefined;
      const syncOpts = { verify: probe ? { probe, tolerance: cfg.sync.tolerance } : (false as const), adapterOnly };
      // 3. Reference (and, for a KL penalty in the reward, old-policy) log-probs from the trainer.
      const batch = buildTrainBatch({ prompts, completions });
      // TRL's mask_truncated_completions: a completion cut by maxNewTokens takes no loss (it still shaped the advantages).
      let maskedRows = 0;
      if (cfg.maskTruncatedCompletions) {
        kept.finishReasons.forEach((f, r) => {
          if (f !== 'length') return;
          batch.targets.fill(-100, r * batch.seqLen, (r + 1) * batch.seqLen);
          maskedRows++;
        });
      }
      const ref = cfg.beta > 0 ? assembleRows(batch, await trainers.call('computeRefLogprobs', batch, cfg.temperature)) : undefined;
      const oldForReward = cfg.klInReward ? assembleRows(batch, await trainers.call('computeLogprobs', batch, cfg.temperature)) : undefined;
      const engineAligned = alignToTargets(batch, prompts, engineLogprobs);
      const klPenalty = oldForReward && ref ? rowKl(batch, oldForReward, ref) : null;
      const shaped = klPenalty ? kept.rewards.map((x, i) => x - cfg.beta * klPenalty[i]!) : kept.rewards;
      const adv = groupAdvantages(shaped, { numGenerations: G, scale: cfg.scaleRewards });
      lap('logprob');
      // 4. The policy update: numIterations passes of stepsPerGeneration optimizer steps (update.ts).
      const optimizerStepsPerRollout = cfg.numIterations * cfg.stepsPerGeneration;
      const refresh = cfg.syncRefModel && step % cfg.refModelSyncSteps === 0;
      // The update's last call syncs too (update-sync.ts; colocated, it wakes the rank's engine
      // first), unless the reference is refreshed between the update and the sync this step.
      let joined: Promise<SyncReport> | undefined;
      let trainEnds: number[] = [];
      const last = !refresh
        ? (micro: Parameters<TrainerActor['lossSteps']>[1], o: Record<string, unknown>) => {
            const calls = updaters.call('lossStepsThenSync', 'grpo', micro, o, syncOpts, sleepLevel !== null);
            joined = calls.then((rs) => {
              trainEnds = rs.map((r) => r.trainEndMs);
              return rs[0]!.sync;
            });
            joined.catch(() => undefined); // reported by stepSync.finish() or by the update itself
            return calls.then((rs) => rs[0]!.step);
          }
        : undefined;
      const update = policyUpdate(
        trainers,
        {
          batch,
          advantages: Float32Array.from(adv),
          engineLogprobs: engineAligned,
          ...(ref && !cfg.klInReward ? { refLogprobs: ref } : {}),
          ...(oldForReward ? { oldLogprobs: oldForReward } : {}),
        },
        {
          shape: {
            numIterations: cfg.numIterations,
            stepsPerGeneration: cfg.stepsPerGeneration,
            gradientAccumulationSteps: cfg.gradientAccumulationSteps,
            dp: trainerDp,
          },
          loss: {
            clipLow: cfg.clipLow,
            clipHigh: cfg.clipHigh,
            beta: cfg.klInReward ? 0 : cfg.beta,
            temperature: cfg.temperature,
            lossType: cfg.lossType,
            delta: cfg.delta,
            importanceSamplingLevel: cfg.importanceSamplingLevel,
            klEstimator: cfg.klEstimator,
            maxCompletionLength: cfg.maxNewTokens,
            entropyCoeff: cfg.entropyCoeff,
            ...(cfg.rolloutCorrection ? { rolloutCorrection: cfg.rolloutCorrection } : {}),
          },
          schedule,
          firstStep: (step - 1) * optimizerStepsPerRollout,
          temperature: cfg.temperature,
        },
        last,
      );
      // Server mode: the engine ranks enter the sync now and wait for the trainers there
      // (step-sync.ts); called after the update's first calls went out, so rank 0's
      // messages to the engines do not hold the update back.
      stepSync.begin(syncOpts);
      const tr = await update;
      if (refresh) await trainers.call('refreshReference', cfg.refModelMixupAlpha);
      lap('train');
      const updateEndMs = epochMs();
      // 5. Weight sync (wakes a sleeping colocated engine first).
      if (sleepLevel && !joined) await rollouts.call('wake'); // joined: the update's last call woke them
      const rep = await stepSync.finish(syncOpts, joined);
      lap('sync');
      if (joined) {
        // The trainer ranks' sides of the sync ran inside the update's last call: from the last
        // rank's end of training on, the update phase was the sync (update-sync.ts).
        const moved = syncInUpdate(trainEnds, updateEndMs, seconds.train, rep.seconds);
        seconds.train -= moved;
        seconds.sync += moved;
      }
      // Metrics (the loss's stats are sums over every optimizer step of the update).
      const st = tr.stats;
      const tokens = st.tokens ?? 0;
      let entropy = 0,
        sampled = 0;
      for (let i = 0; i < batch.targets.length; i++) {
        if (batch.targets[i] === -100) continue;
        entropy -= engineAligned[i]!;
        sampled++;
      }
      const per = (k: string) => (tokens ? (st[k] ?? 0) / tokens : 0);
      const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
      const std = Math.sqrt(rewards.reduce((a, b) => a + (b - mean) ** 2, 0) / rewards.length);
      const m: StepMetrics = {
        step,
        lr: tr.lr,
        rewardMean: mean,
        rewardStd: std,
        rewards: rewardMeans(first),
        completionLength: lengthStats(first.completions),
        kl: klPenalty ? klPenalty.reduce((a, b) => a + b, 0) / Math.max(1, sampled) : per('kl'),
        clipFraction: per('clipped'),
        entropy: sampled ? entropy / sampled : 0,
        ...(cfg.entropyCoeff > 0 ? { entropyExact: per('entropy') } : {}),
        loss: tr.loss,
        gradNorm: tr.gradNorm,
        responseTokens: sampled,
        seconds,
        syncBytes: rep.bytes,
        // Over the step's sync phase as timed here: a server-mode trainer rank's own report
        // ends when its transfers are enqueued (sync/in-flight.ts), not when they landed.
        syncGBs: seconds.sync > 0 ? rep.bytes / seconds.sync / 1e9 : rep.GBs,
      };
      metrics.push(m);
      log?.step({
        ...m,
        engineTrainerLogprobDiff: per('mismatchAbsDiff'),
        mismatchK3: per('mismatchK3'),
        isWeightMean: per('isWeight'),
        isCorrectedFraction: per('isCorrected'),
        samplingRounds: rounds,
        droppedGroups,
        maskedTruncatedRows: maskedRows,
        truncatedFraction: first.finishReasons.filter((f) => f === 'length').length / first.finishReasons.length,
        rewardStats: first.rewardSummary,
        trainedGroups: kept.rewards.length / G,
        trainedFlatGroups: flatGroups(kept.rewards, G),
        clipLowFraction: per('clippedLow'),
        clipHighFraction: per('clippedHigh'),
        ratioMean: per('ratio'),
        optimizerSteps: tr.optimizerSteps,
        // The router load-balancing loss (output_router_logits), mean over the update's optimizer steps.
        ...(st.aux_loss !== undefined ? { auxLoss: st.aux_loss / Math.max(1, tr.optimizerSteps) } : {}),
        recomputedOld: tr.recomputedOld,
        // The trainer's padded token slots (update.ts): at the batch's width, and with each rank's rows trimmed to theirs.
        paddedFraction: tr.paddedFraction,
        syncPeakExtraBytes: rep.peakExtraBytes,
        verified: rep.verified ?? null,
        time: new Date().toISOString(),
      });
      progress.update(m, (line) => ctx.log.info(line));
      if (cfg.eval && (step % cfg.eval.every === 0 || step === cfg.steps)) {
        // Held-out prompts (a prompt stream the training never draws from), on the synced weights.
        const ev = cfg.eval;
        const held = source.heldOut(ev.prompts);
        const t0e = performance.now();
        const out = await sample(held, ev.numGenerations, { temperature: ev.temperature, seed: cfg.seed * 1_000_003 + EVAL_STREAM });
        const em = out.rewards.reduce((x, y) => x + y, 0) / out.rewards.length;
        const es = Math.sqrt(out.rewards.reduce((x, y) => x + (y - em) ** 2, 0) / out.rewards.length);
        const exact = out.rewards.filter((x) => x >= 1).length / out.rewards.length;
        const rec = {
          step,
          rewardMean: em,
          rewardStd: es,
          exactFraction: exact,
          samples: out.rewards.length,
          completionLength: lengthStats(out.completions),
          temperature: ev.temperature,
          seconds: (performance.now() - t0e) / 1000,
        };
        log?.eval(rec);
        ctx.log.info(
          `eval at step ${step}: reward ${em.toFixed(3)} (exact ${(exact * 100).toFixed(1)}%) over ${out.rewards.length} samples of ${ev.prompts} held-out prompts`,
        );
        evals.push(rec);
      }
      if (cfg.checkpoint?.every !== undefined && step % cfg.checkpoint.every === 0) {
        if (cfg.beta > 0) await trainers.call('saveReference', refDir!);
        await trainers.call('save', cfg.checkpoint.dir, step, { rewardMean: mean });
      }
    }
  } catch (e) {
    stepSync.cancel(`ServerSync: the GRPO controller (rank 0) failed before the trainer ranks joined the step's weight sync: ${(e as Error).message}`);
    throw e;
  } finally {
    progress.stop();
    await pool.close();
  }
  if (cfg.save) {
    const [dir] = await trainers.call('exportHf', cfg.save.dir, {
      ...(cfg.save.dtype ? { dtype: cfg.save.dtype } : {}),
      expertLayout: cfg.save.expertLayout,
      merged: cfg.save.merged,
    });
    ctx.log.info(`saved the model as a Hugging Face folder: ${dir}`);
  }
  const summary = { steps: metrics, evals, startStep, seconds: (Date.now() - t0) / 1000 };
  ctx.log.info(
    `\n${summaryTable(metrics)}\n(${summary.seconds.toFixed(1)} s, ${cfg.mode} mode, ${roles.trainerRanks.length} trainer / ${roles.engineRanks.length} engine ranks)`,
  );
  for (const r of controls.ranks) if (r !== 0) await controls.ref(r).invoke('finish', [], opts);
  return summary;
}

/** Σ_t (old − ref) over each row's response tokens: the k1 KL of a sample (for a KL penalty in the reward). */
function rowKl(batch: TrainBatch, old: Float32Array, ref: Float32Array): number[] {
  const out: number[] = [];
  for (let r = 0; r < batch.batch; r++) {
    let s = 0;
    for (let t = 0; t < batch.seqLen; t++) {
      const i = r * batch.seqLen + t;
      if (batch.targets[i] !== -100) s += old[i]! - ref[i]!;
    }
    out.push(s);
  }
  return out;
}

/** Groups of `n` whose rewards are all equal (what dynamic sampling keeps out of the loss). */
function flatGroups(rewards: readonly number[], n: number): number {
  let flat = 0;
  for (let g = 0; g < rewards.length; g += n) if (rewards.slice(g, g + n).every((x) => x === rewards[g])) flat++;
  return flat;
}

/** Mean of each reward function over a round, by name (the weighted total is rewardMean). */
function rewardMeans(s: Sampled): Record<string, number> {
  return Object.fromEntries(Object.entries(s.rewardSummary ?? {}).map(([k, v]) => [k, v.mean]));
}
