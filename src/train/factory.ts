/**
 * Builds a strategy from a parsed trainer config on one rank (collective over `comm`
 * for the sharded strategies): resolves the model config, the initial weights (seeded,
 * or the HF checkpoint beside config.json) and the parallel sizes.
 */
import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Communicator } from '../runtime/comm/comm.js';
import type { Device } from '../runtime/device/device-index.js';
import { ConfigError } from '../runtime/errors.js';
import { loadModelConfig, type ModelConfig } from '../model/config.js';
import type { HostParam } from '../model/param-store.js';
import { initialParams, toFusedParams } from '../model/params.js';
import { readF32Checkpoint } from './checkpoint.js';
import { checkStrategyDtype, type TrainerConfig } from './config.js';
import { Fsdp2Strategy } from './fsdp2/strategy.js';
import { loadFsdp2Shards } from './fsdp2/load-shards.js';
import { MegatronStrategy } from './megatron/strategy.js';
import { loadMegatronShards } from './megatron/load-shards.js';
import { checkParallelSizes } from './megatron/layout.js';
import { SingleDeviceStrategy } from './single.js';
import type { TrainStrategy } from './strategy.js';

/** The config.json path for a model folder or file. */
export function modelConfigPath(model: string): string {
  return existsSync(model) && statSync(model).isDirectory() ? join(model, 'config.json') : model;
}

/** Full HF-named fp32 host weights (fused experts) from the checkpoint beside config.json. */
export async function readHfWeights(cfg: ModelConfig, model: string): Promise<Map<string, HostParam>> {
  return toFusedParams(await readF32Checkpoint(dirname(modelConfigPath(model))), cfg);
}

export interface StrategyContext {
  /** The trainer group's communicator (all ranks that train). */
  comm: Communicator;
  device: Device;
}

export async function createStrategy(config: TrainerConfig, ctx: StrategyContext): Promise<TrainStrategy> {
  const cfg = loadModelConfig(modelConfigPath(config.model));
  const n = ctx.comm.size;
  const dtype = config.dtype ?? 'float32';
  checkStrategyDtype(config.strategy, dtype, 'dtype');
  if (config.strategy === 'fsdp2' && config.init === 'checkpoint' && config.tp === 1 && config.ep === 1) {
    // The sharded loader: each rank's host and device hold its own rows only.
    const shards = await loadFsdp2Shards(dirname(modelConfigPath(config.model)), cfg, ctx.comm, config.load);
    return Fsdp2Strategy.create({ comm: ctx.comm, cfg, params: shards, dtype, ...(config.lora ? { lora: { config: config.lora } } : {}) });
  }
  if (config.strategy === 'megatron' && config.init === 'checkpoint') {
    const sizes = checkParallelSizes(cfg, n, config);
    const local = await loadMegatronShards(dirname(modelConfigPath(config.model)), cfg, ctx.comm, sizes, config.load);
    return MegatronStrategy.create({
      comm: ctx.comm,
      cfg,
      params: local,
      tp: config.tp,
      dp: sizes.dp,
      ep: config.ep,
      ...(config.lora ? { lora: { config: config.lora } } : {}),
    });
  }
  const params = config.init === 'checkpoint' ? await readHfWeights(cfg, config.model) : initialParams(cfg, config.init.seed);
  // LoRA: adapters start from the PEFT init (config.lora.seed); the base stays frozen.
  const lora = config.lora && { config: config.lora };
  switch (config.strategy) {
    case 'single':
      if (n !== 1)
        throw new ConfigError(`strategy 'single' trains on one rank but the trainer group has ${n}. HINT: use 'fsdp2' or 'megatron' for several ranks.`, {
          ranks: n,
        });
      return SingleDeviceStrategy.create(cfg, ctx.device, params, { dtype, ...(lora ? { lora } : {}) });
    case 'fsdp2':
      if (config.tp !== 1 || config.ep !== 1)
        throw new ConfigError(
          `strategy 'fsdp2' shards over data parallel only; tp and ep must be 1 (got tp=${config.tp}, ep=${config.ep}). HINT: use 'megatron' for tensor or expert parallelism.`,
        );
      return Fsdp2Strategy.create({ comm: ctx.comm, cfg, params, dtype, ...(lora ? { lora } : {}) });
    case 'megatron':
      return MegatronStrategy.create({ comm: ctx.comm, cfg, params, tp: config.tp, dp: config.dp, ep: config.ep, ...(lora ? { lora } : {}) });
    default:
      throw new ConfigError(`strategy '${config.strategy}' is not available in this build.`);
  }
}
