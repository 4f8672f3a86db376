/**
 * zod schemas for every option object the runtime accepts. Parsing goes through
 * `parseConfig`, which turns zod issues into one ConfigError whose message names
 * each bad field, what was received and what was expected.
 */
import { z } from 'zod';
import { ConfigError } from './errors.js';
import { parseBytes } from './env.js';

/** Formats zod issues as "  - field: message" lines. */
export function formatIssues(error: z.ZodError): string {
  return error.issues
    .map((i) => {
      const path = i.path.length ? i.path.map(String).join('.') : '(root)';
      return `  - ${path}: ${i.message}${received(i)}`;
    })
    .join('\n');
}

/** " (received -3)" when the issue kept its input and the message does not already say it. */
function received(i: z.core.$ZodIssue): string {
  if (!('input' in i) || i.input === undefined || /received/i.test(i.message)) return '';
  let shown: string;
  try {
    shown = JSON.stringify(i.input) ?? String(i.input);
  } catch {
    shown = String(i.input);
  }
  return shown.length > 80 ? ` (received ${typeof i.input})` : ` (received ${shown})`;
}

export function parseConfig<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const r = schema.safeParse(value, { reportInput: true });
  if (!r.success) {
    // One issue is one line; several are one line each under a header.
    const issues = formatIssues(r.error);
    const text = r.error.issues.length === 1 ? `Invalid ${what}: ${issues.replace(/^\s+- /, '')}` : `Invalid ${what}:\n${issues}`;
    throw new ConfigError(text, { issues: r.error.issues.map((i) => ({ path: i.path.map(String), message: i.message })) });
  }
  return r.data;
}

export const byteSize = z.union([z.number(), z.string()]).transform((v, ctx) => {
  try {
    return parseBytes(v);
  } catch (e) {
    ctx.addIssue({ code: 'custom', message: (e as Error).message });
    return z.NEVER;
  }
});

const positiveInt = (what: string) =>
  z
    .number({ error: `expected ${what} as a number` })
    .int(`expected an integer for ${what}`)
    .positive(`expected a positive integer for ${what}`);
const nonNegativeMs = z.number().int().min(0, 'expected a non-negative number of milliseconds');

export const OutputOptionsSchema = z
  .object({
    /** Prefix each line a rank prints with `[rank N]`. */
    prefix: z.boolean().default(true),
    /** Which ranks' output reaches the terminal; failure reports always do. */
    ranks: z.union([z.literal('all'), z.array(z.number().int().min(0))]).default('all'),
    /** Also write each rank's output, unprefixed, to `<logDir>/rank-<N>.log` (torchrun's --log-dir). */
    logDir: z.string().min(1).optional(),
    /**
     * A real terminal the ranks' live displays may draw on: these ranks see a TTY
     * stderr of this width, forwarded raw (progress bars redraw in place).
     */
    terminal: z
      .object({ ranks: z.array(z.number().int().min(0)), columns: z.number().int().positive() })
      .strict()
      .optional(),
  })
  .strict();

export const WorldOptionsSchema = z
  .object({
    /** Number of ranks (dedicated worker threads). */
    size: positiveInt('size').max(1024, 'at most 1024 ranks per process'),
    /** Device memory capacity per rank (bytes or "512MiB"); default ASCENT_DEVICE_MEMORY. */
    deviceMemory: byteSize.optional(),
    /** Extra environment for every rank (on top of process.env). */
    env: z.record(z.string(), z.string()).default({}),
    /** Default per-call timeout of actor calls (0 = none). */
    callTimeoutMs: nonNegativeMs.optional(),
    /** How long ranks get to stop on their own before they are terminated. */
    gracePeriodMs: nonNegativeMs.optional(),
    /** Piscina task pool for stateless work; `false` creates none. */
    taskPool: z.union([z.literal(false), z.object({ maxThreads: positiveInt('taskPool.maxThreads').optional() }).strict()]).default({}),
    output: OutputOptionsSchema.default({ prefix: true, ranks: 'all' }),
    /** Max time for all ranks to come up. */
    startTimeoutMs: nonNegativeMs.default(60_000),
  })
  .strict();
export type WorldOptions = z.input<typeof WorldOptionsSchema>;
export type ResolvedWorldOptions = z.output<typeof WorldOptionsSchema>;

export const ActorSpecSchema = z
  .object({
    /** Module path or file URL exporting the actor (class, factory function or object). */
    module: z.union([z.string().min(1), z.instanceof(URL)]),
    /** Export name; default `default`. */
    export: z.string().min(1).default('default'),
    /** Constructor / factory arguments after the RankContext (structured-clonable). */
    args: z.array(z.unknown()).default([]),
    /** Name under which the actor is known (errors, lookup); default the export name. */
    name: z.string().min(1).optional(),
    /** Ranks to spawn on; default every rank. */
    ranks: z.array(z.number().int().min(0)).optional(),
  })
  .strict();
export type ActorSpec = z.input<typeof ActorSpecSchema>;

export const CallOptionsSchema = z
  .object({
    timeoutMs: nonNegativeMs.optional(),
    signal: z.instanceof(AbortSignal).optional(),
  })
  .strict();
export type CallOptions = z.input<typeof CallOptionsSchema>;

export const LaunchOptionsSchema = z
  .object({
    nproc: positiveInt('--nproc').max(1024, 'at most 1024 ranks'),
    entry: z.string().min(1),
    entryArgs: z.array(z.string()).default([]),
    rank0Only: z.boolean().default(false),
    gracePeriodMs: nonNegativeMs.default(5000),
    maxTimeMs: nonNegativeMs.optional(),
    deviceMemory: byteSize.optional(),
    prefix: z.boolean().default(true),
    env: z.record(z.string(), z.string()).default({}),
    /** One log file per rank in this folder (created if missing). */
    logDir: z.string().min(1).optional(),
  })
  .strict();
export type LaunchOptions = z.input<typeof LaunchOptionsSchema>;
