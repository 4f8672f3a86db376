/**
 * One rank of the weight-sync benchmark (run under `launch` by bench/sync.ts):
 *   launch --nproc 2 dist/bench/sync-rank.js colocate <fsdp2|megatron> <bucketBytes>
 *   launch --nproc 4 dist/bench/sync-rank.js server megatron <bucketBytes> [bfloat16]
 * (a last argument bfloat16 makes the engines bf16: the sync casts and moves half the bytes)
 * Builds the synthetic ~514 MB (fp32) dense model below, the strategy and the engine(s),
 * measures a STREAM-like device copy on every rank at once (the same run; best of 6,
 * before and again after the syncs, the higher counts), times full syncs (one warm-up,
 * best of 3) and prints `RESULT {json}` per rank, with the bytes its engine holds. Then
 * three more syncs with verify: true (exact fingerprints of every tensor region on every
 * engine rank, compared with the trainers'): their sync and verification times, from the
 * same reports, give the cost of verification as a ratio to the sync time.
 */
import {
  ColocateSync,
  Fsdp2Strategy,
  MegatronStrategy,
  RolloutEngine,
  ServerSync,
  Tensor,
  copy,
  paramSpecs,
  parseModelConfig,
  type RankContext,
  type HostParam,
  type TrainStrategy,
} from '../src/internal.js';

export const BENCH_CONFIG = {
  architectures: ['Qwen3ForCausalLM'],
  model_type: 'qwen3',
  hidden_size: 1024,
  intermediate_size: 4096,
  num_hidden_layers: 4,
  num_attention_heads: 16,
  num_key_value_heads: 8,
  head_dim: 64,
  hidden_act: 'silu',
  rms_norm_eps: 1e-6,
  rope_theta: 10000,
  max_position_embeddings: 64,
  vocab_size: 32000,
  tie_word_embeddings: false,
  bos_token_id: 1,
  eos_token_id: 2,
  pad_token_id: 0,
};

async function streamCopyGBs(ctx: RankContext, comm: { barrier(s?: unknown): Promise<void> }): Promise<number> {
  const bytes = 128 * 1024 * 1024;
  const a = Tensor.zeros(ctx.device, [bytes / 4], 'fp32'),
    b = Tensor.empty(ctx.device, [bytes / 4], 'fp32');
  const stream = ctx.device.defaultStream;
  let best = Infinity;
  try {
    for (let rep = 0; rep < 6; rep++) {
      await comm.barrier(stream);
      const t0 = performance.now();
      copy(b, a, { stream });
      await stream.synchronize();
      best = Math.min(best, (performance.now() - t0) / 1000);
    }
  } finally {
    a.release();
    b.release();
  }
  return (2 * bytes) / best / 1e9;
}

export const UPDATE_SHAPE = { rows: 16, seqLen: 24, microBatches: 1 };

/**
 * Runs one warm-up forwardBackward (first-touch allocations) and returns the timed update:
 * UPDATE_SHAPE's batch as its micro-batches, clipping and one AdamW step, in seconds.
 */
async function prepareUpdate(strategy: TrainStrategy): Promise<() => Promise<number>> {
  const { rows, seqLen, microBatches } = UPDATE_SHAPE;
  const per = rows / microBatches;
  const vocab = BENCH_CONFIG.vocab_size;
  const micro = (m: number) => {
    const inputIds = new Int32Array(per * seqLen),
      targets = new Int32Array(per * seqLen);
    for (let i = 0; i < inputIds.length; i++) inputIds[i] = (i * 7919 + m * 104729) % vocab;
    for (let i = 0; i < targets.length; i++) targets[i] = (i + 1) % seqLen === 0 ? -100 : inputIds[i + 1]!;
    return { inputIds, targets, batch: per, seqLen };
  };
  const batches = Array.from({ length: microBatches }, (_, m) => micro(m));
  strategy.zeroGrad();
  await strategy.forwardBackward(batches[0]!);
  strategy.zeroGrad();
  return async () => {
    const t0 = performance.now();
    for (const b of batches) await strategy.forwardBackward(b);
    await strategy.clipGradNorm(1);
    strategy.optimizerStep({ lr: 1e-6 });
    await strategy.clipGradNorm(null); // a collective read: the AdamW step has run on every rank
    return (performance.now() - t0) / 1000;
  };
}

export async function main(ctx: RankContext): Promise<void> {
  const [mode, kind, bucketArg, dtypeArg] = ctx.args as [string, string, string, string | undefined];
  const dtype = dtypeArg === 'bfloat16' ? 'bfloat16' : 'float32';
  const bucketBytes = Number(bucketArg);
  const cfg = parseModelConfig(BENCH_CONFIG, 'bench');
  const params = new Map<string, HostParam>();
  for (const s of paramSpecs(cfg, { expertLayout: 'fused' })) {
    const data = new Float32Array(s.shape.reduce((x, y) => x * y, 1));
    for (let i = 0; i < data.length; i++) data[i] = ((i % 97) - 48) * 1e-3;
    params.set(s.name, { shape: s.shape, data });
  }
  const rankStream = await streamCopyGBs(ctx, ctx.comm as never);
  let run: (verify?: boolean) => Promise<{ seconds: number; peakExtraBytes: number; bytes: number; verified?: { seconds: number; fingerprints: number } }>;
  let trainer = '',
    engineTp = 0;
  const cleanup: Array<() => void> = [];
  let engineOf: RolloutEngine | undefined;
  let trainerOf: TrainStrategy | undefined;
  if (mode === 'colocate') {
    const strategy: TrainStrategy =
      kind === 'fsdp2'
        ? await Fsdp2Strategy.create({ comm: ctx.comm, cfg, params })
        : await MegatronStrategy.create({ comm: ctx.comm, cfg, params, tp: ctx.worldSize });
    engineTp = kind === 'fsdp2' ? 1 : ctx.worldSize;
    const tp = engineTp > 1 ? (await ctx.comm.split(0, ctx.rank))! : undefined;
    const engine = RolloutEngine.create(cfg, { device: ctx.device, tp, maxBatch: 1, maxSeqLen: 8, dtype });
    trainer = `${kind} ${strategy.layout}`;
    engineOf = engine;
    trainerOf = strategy;
    const sync = new ColocateSync({ strategy, engine, bucketBytes });
    run = (verify) => sync.sync(verify ? { verify: true } : {});
    cleanup.push(
      () => engine.release(),
      () => strategy.release(),
    );
  } else {
    const trainerRanks = ctx.worldSize / 2;
    const isTrainer = ctx.rank < trainerRanks;
    const group = (await ctx.comm.split(isTrainer ? 0 : 1, ctx.rank))!;
    const syncComm = (await ctx.comm.split(0, ctx.rank))!;
    engineTp = ctx.worldSize - trainerRanks;
    let strategy: TrainStrategy | undefined, engine: RolloutEngine | undefined;
    if (isTrainer) strategy = await MegatronStrategy.create({ comm: group, cfg, params, tp: trainerRanks });
    else {
      engine = RolloutEngine.create(cfg, { device: ctx.device, tp: group, maxBatch: 1, maxSeqLen: 8, dtype });
      const reload = engine.beginReload();
      reload.load(params);
      reload.finish();
    }
    trainer = `megatron tp${trainerRanks}`;
    engineOf = engine;
    trainerOf = strategy;
    const sync = ServerSync.create({ comm: syncComm, role: isTrainer ? 'trainer' : 'engine', trainerRanks, cfg, strategy, engine, bucketBytes });
    run = (verify) => sync.sync(verify ? { verify: true } : {});
    cleanup.push(
      () => engine?.release(),
      () => strategy?.release(),
    );
  }
  params.clear();
  await run(); // warm-up
  let best: { seconds: number; peakExtraBytes: number; bytes: number } | null = null;
  for (let i = 0; i < 3; i++) {
    await ctx.comm.barrier();
    const r = await run();
    if (!best || r.seconds < best.seconds) best = r;
  }
  // Verification cost: sync and verification time of the same verified syncs (best of 3 by their sum).
  let verified: { syncSeconds: number; verifySeconds: number; fingerprints: number } | null = null;
  for (let i = 0; i < 3; i++) {
    await ctx.comm.barrier();
    const r = await run(true);
    const v = { syncSeconds: r.seconds, verifySeconds: r.verified!.seconds, fingerprints: r.verified!.fingerprints };
    if (!verified || v.syncSeconds + v.verifySeconds < verified.syncSeconds + verified.verifySeconds) verified = v;
  }
  // One GRPO-shaped update on the trainer ranks (no sync, no engine work), to put the sync in
  // proportion: an eighth of the quickstart's batch (the quickstart updates on 16 prompts x 8
  // samples = 128 rows; here one micro-batch of 16 rows of 24 tokens), gradient clipping and one
  // AdamW step. A GRPO step also generates, computes log-probs and updates on the whole
  // batch, so sync / (sync + this update) is an upper bound on the sync's share of it.
  const update = trainerOf ? await prepareUpdate(trainerOf) : undefined;
  await ctx.comm.barrier(); // every rank, engines too: the trainers start together
  const updateSeconds = update ? await update() : 0;
  // Bytes of runtime parameters this rank's engine holds (what a sync must write here).
  const engineBytes = engineOf?.params.deviceBytes() ?? 0;
  // The copy bandwidth again after the syncs; the better of the two counts (conservative:
  // a higher bandwidth makes the efficiency lower).
  const streamAfter = await streamCopyGBs(ctx, ctx.comm as never);
  for (const f of cleanup) f();
  console.log(
    'RESULT ' +
      JSON.stringify({
        rank: ctx.rank,
        mode,
        dtype,
        trainer,
        engineTp,
        engineBytes,
        streamGBs: Math.max(rankStream, streamAfter),
        streamBefore: rankStream,
        streamAfter,
        ...best,
        updateSeconds,
        verify: verified,
      }),
  );
}
