/**
 * Model patches: fast or fused kernels registered over a reference path, per model
 * family, switchable for debugging (ms-swift's `--enable_npu_model_patch`). With
 * patches off, every patched op runs its plain reference kernel, so a numerical
 * problem can be bisected to "the patch" or "the model".
 *
 * The switch is `--enable-npu-model-patch true|false` on `launch` (which sets the
 * environment variable for every rank) or ASCENT_ENABLE_NPU_MODEL_PATCH directly.
 * A value is required; anything but true/false is a ConfigError.
 */
import { ConfigError, InvalidArgumentError } from './errors.js';
import { envString } from './env.js';

export type KernelImpl = 'fast' | 'reference';

export interface PatchSpec {
  /** e.g. `qwen3.rms_norm`, `qwen3_moe.grouped_experts`. */
  readonly name: string;
  /** Model families the patch applies to. */
  readonly families: readonly string[];
  readonly description: string;
}

const registry = new Map<string, PatchSpec>();
/** Per-thread override (tests, programmatic use); undefined = from the environment. */
let override: boolean | undefined;
/**
 * The environment's switch as this thread last read it (undefined: not read yet). Every
 * patched op asks for it, and a process.env read is a C++ call under a lock (about 1 µs,
 * 2-3% of a 16-rank GRPO step's JS time when read per op), so it is read once per thread:
 * on first use, and again after setModelPatchesEnabled(undefined).
 */
let fromEnv: boolean | undefined;

export function registerPatch(spec: PatchSpec): void {
  if (registry.has(spec.name)) throw new InvalidArgumentError(`A model patch named ${JSON.stringify(spec.name)} is already registered.`);
  registry.set(spec.name, spec);
}

export function listPatches(family?: string): PatchSpec[] {
  return [...registry.values()].filter((p) => family === undefined || p.families.includes(family));
}

/** Parses a true/false switch value; `what` names where it came from for the message. */
export function parsePatchSwitch(value: string | undefined, what: string): boolean {
  if (value === undefined || value === '') {
    throw new ConfigError(`${what} needs a value: true or false. HINT: --enable-npu-model-patch false runs the reference kernels.`);
  }
  const v = value.trim().toLowerCase();
  if (v === 'true') return true;
  if (v === 'false') return false;
  throw new ConfigError(`Expected true or false for ${what} but received ${JSON.stringify(value)}.`, { value });
}

/** Whether model patches are on in this thread (default on). */
export function modelPatchesEnabled(): boolean {
  if (override !== undefined) return override;
  if (fromEnv === undefined) {
    const raw = envString('ASCENT_ENABLE_NPU_MODEL_PATCH');
    fromEnv = raw === undefined ? true : parsePatchSwitch(raw, 'ASCENT_ENABLE_NPU_MODEL_PATCH');
  }
  return fromEnv;
}

/**
 * Forces patches on or off in this thread; undefined goes back to the environment and
 * reads it again (a change to process.env is seen only then, or in a new thread).
 */
export function setModelPatchesEnabled(enabled: boolean | undefined): void {
  override = enabled;
  if (enabled === undefined) fromEnv = undefined;
}

/** The kernel implementation a patched op should use now. */
export function patchImpl(name: string): KernelImpl {
  if (!registry.has(name))
    throw new InvalidArgumentError(`No model patch named ${JSON.stringify(name)} is registered (known: ${[...registry.keys()].join(', ') || 'none'}).`);
  return modelPatchesEnabled() ? 'fast' : 'reference';
}
