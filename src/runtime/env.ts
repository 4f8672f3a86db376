/**
 * Every environment variable Ascent reads, declared once with its default and its
 * meaning (NCCL_PARAM style). Nothing else in the code base reads `process.env`
 * for runtime tunables: call `envInt` / `envString` / `envBool` with a name from
 * this table. The README's table is checked against this one by a test.
 */
import { ConfigError } from './errors.js';

export interface EnvVarSpec {
  readonly name: string;
  readonly kind: 'int' | 'string' | 'bool' | 'bytes';
  /** Default as the string a user would write, or undefined when unset means "off". */
  readonly default: string | undefined;
  readonly description: string;
  /** Set by the runtime itself (per rank); users normally do not set it. */
  readonly setByRuntime?: boolean;
  /** Smallest accepted value (int and bytes kinds). */
  readonly min?: number;
}

export const ENV_VARS = [
  { name: 'RANK', kind: 'int', default: undefined, setByRuntime: true, description: 'Global rank of this worker (set per rank by `launch` and the World).' },
  { name: 'LOCAL_RANK', kind: 'int', default: undefined, setByRuntime: true, description: 'Rank within this process/node; also the device ordinal.' },
  { name: 'WORLD_SIZE', kind: 'int', default: undefined, setByRuntime: true, description: 'Number of ranks in the world.' },
  { name: 'LOCAL_WORLD_SIZE', kind: 'int', default: undefined, setByRuntime: true, description: 'Number of ranks in this process/node.' },
  {
    name: 'ASCENT_DEVICE_MEMORY',
    kind: 'bytes',
    default: '16GiB',
    min: 1,
    description: 'Memory capacity of each device (e.g. `512MiB`, `16GiB`); bounded by host memory.',
  },
  {
    name: 'HCCL_CONNECT_TIMEOUT',
    kind: 'int',
    default: '120',
    min: 1,
    description: 'Seconds a communicator init (rendezvous) may wait for all ranks. The runtime sets 120 when unset.',
  },
  {
    name: 'HCCL_EXEC_TIMEOUT',
    kind: 'int',
    default: '1800',
    min: 1,
    description: 'Seconds one collective may wait for its peers before a CollectiveTimeoutError.',
  },
  {
    name: 'ASCENT_TRACE_DIR',
    kind: 'string',
    default: undefined,
    description:
      'Folder for flight-recorder dumps of aborted communicators (default: `<os tmpdir>/ascent-flight-recorder`); explain them with `ascent trace <dir>`.',
  },
  {
    name: 'ASCENT_ENABLE_NPU_MODEL_PATCH',
    kind: 'string',
    default: 'true',
    description: 'Model patches (fast and fused kernels over the reference path): `true` or `false`; `launch --enable-npu-model-patch` sets it.',
  },
  {
    name: 'ASCENT_ACTOR_CALL_TIMEOUT_MS',
    kind: 'int',
    default: '0',
    min: 0,
    description: 'Default per-call actor RPC timeout in ms (0 = none; a dead worker still fails calls at once).',
  },
  {
    name: 'ASCENT_ACTOR_CALLSITES',
    kind: 'bool',
    default: '0',
    description: "Append the caller's stack to actor call errors (costs ~15 µs per call: V8 walks the async stack).",
  },
  {
    name: 'ASCENT_SHUTDOWN_GRACE_MS',
    kind: 'int',
    default: '5000',
    min: 0,
    description: 'Grace period before ranks are terminated after a failure or shutdown.',
  },
  {
    name: 'ASCENT_COMM_MOVERS',
    kind: 'int',
    default: undefined,
    min: 1,
    description:
      'Ranks that move the data of a large collective for the whole communicator (default: one per core, at most the number of ranks); read by the native communicator when a communicator is created.',
  },
  { name: 'ASCENT_TASK_POOL_THREADS', kind: 'int', default: '2', min: 1, description: 'Maximum threads of the Piscina task pool created with each World.' },
  {
    name: 'ASCENT_PROFILE',
    kind: 'string',
    default: undefined,
    description:
      'Folder to write a Chrome / Perfetto trace per rank into (every stream op, host wait and actor call); `ascent profile <dir>` merges them and prints the top ops.',
  },
  {
    name: 'ASCENT_GDN_BACKEND',
    kind: 'string',
    default: 'fused',
    description:
      'Implementation of the Gated DeltaNet kernels when a call names none: `fused` (fast fp32 kernels) or `reference` (the plain double-accumulating loops).',
  },
  { name: 'ASCENT_LOG_PREFIX', kind: 'bool', default: '1', description: 'Prefix rank output lines with `[rank N]` under `launch`.' },
] as const satisfies readonly EnvVarSpec[];

export type EnvVarName = (typeof ENV_VARS)[number]['name'];

const byName = new Map<string, EnvVarSpec>(ENV_VARS.map((v) => [v.name, v]));

export function envSpec(name: EnvVarName): EnvVarSpec {
  return byName.get(name)!;
}

function raw(name: EnvVarName, env: NodeJS.ProcessEnv): string | undefined {
  const v = env[name];
  if (v === undefined || v === '') return envSpec(name).default;
  return v;
}

export function envString(name: EnvVarName, env: NodeJS.ProcessEnv = process.env): string | undefined {
  return raw(name, env);
}

export function envInt(name: EnvVarName, env: NodeJS.ProcessEnv = process.env): number | undefined {
  const v = raw(name, env);
  if (v === undefined) return undefined;
  const spec = envSpec(name);
  const n = /^-?\d+$/.test(v.trim()) ? Number.parseInt(v, 10) : Number.NaN;
  if (Number.isNaN(n) || (spec.min !== undefined && n < spec.min)) {
    throw new ConfigError(`Expected ${expectation(spec)} for ${name} but received ${JSON.stringify(v)}. HINT: ${spec.description}`, { name, value: v });
  }
  return n;
}

function expectation(spec: EnvVarSpec): string {
  if (spec.min === 1) return 'a positive integer';
  if (spec.min === 0) return 'a non-negative integer';
  return 'an integer';
}

export function envBool(name: EnvVarName, env: NodeJS.ProcessEnv = process.env): boolean {
  const v = (raw(name, env) ?? '0').trim().toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(v)) return true;
  if (['0', 'false', 'no', 'off'].includes(v)) return false;
  throw new ConfigError(`Expected true/false (or 1/0) for ${name} but received ${JSON.stringify(v)}.`, { name, value: v });
}

const UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  k: 1024,
  kb: 1000,
  kib: 1024,
  m: 1024 ** 2,
  mb: 1e6,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gb: 1e9,
  gib: 1024 ** 3,
};

/** Parses `512MiB`, `16GiB`, `1e9`, `4096`. Throws ConfigError naming `what` on bad input. */
export function parseBytes(value: string | number, what = 'a byte size'): number {
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value) || value < 0) throw new ConfigError(`Expected a non-negative integer for ${what} but received ${value}.`);
    return value;
  }
  const m = /^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*$/i.exec(value);
  const unit = m ? UNITS[m[2]!.toLowerCase()] : undefined;
  if (!m || unit === undefined) {
    throw new ConfigError(`Expected a byte size like 512MiB or 16GiB for ${what} but received ${JSON.stringify(value)}.`);
  }
  return Math.floor(Number(m[1]) * unit);
}

export function envBytes(name: EnvVarName, env: NodeJS.ProcessEnv = process.env): number | undefined {
  const v = raw(name, env);
  if (v === undefined) return undefined;
  const n = parseBytes(v, name);
  const min = envSpec(name).min;
  if (min !== undefined && n < min)
    throw new ConfigError(`Expected a byte size of at least ${min} for ${name} but received ${JSON.stringify(v)}. HINT: ${envSpec(name).description}`, {
      name,
      value: v,
    });
  return n;
}

/**
 * Checks every declared variable that is set, so a bad value is one ConfigError
 * naming the variable before any rank starts (not a crash inside a worker later).
 */
export function validateEnv(env: NodeJS.ProcessEnv = process.env): void {
  for (const spec of ENV_VARS as readonly EnvVarSpec[]) {
    if (spec.setByRuntime) continue;
    const name = spec.name as EnvVarName;
    if (env[name] === undefined || env[name] === '') continue;
    if (spec.kind === 'int') envInt(name, env);
    else if (spec.kind === 'bool') envBool(name, env);
    else if (spec.kind === 'bytes') envBytes(name, env);
  }
}

/**
 * Defaults the runtime writes into the environment when unset, so that children,
 * native code and user code see the same value (HCCL_CONNECT_TIMEOUT=120, as the
 * ms-swift NPU patch does).
 */
export function applyRuntimeEnvDefaults(env: NodeJS.ProcessEnv = process.env): void {
  if (env.HCCL_CONNECT_TIMEOUT === undefined || env.HCCL_CONNECT_TIMEOUT === '') env.HCCL_CONNECT_TIMEOUT = '120';
}
