/** Flag checking for the suites with few flags: an unknown flag is a usage error, not ignored. */

/** A bad flag of a benchmark suite; `bench/main.ts` prints it with the suite's usage and exits 2. */
export class BenchUsageError extends Error {
  override name = 'BenchUsageError';
}

/**
 * Checks `argv` against the flags a suite takes (`valued`: followed by a value) and
 * returns the values by flag.
 */
export function checkFlags(suite: string, argv: readonly string[], flags: { boolean?: string[]; valued?: string[] } = {}): Map<string, string> {
  const out = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (flags.boolean?.includes(a)) out.set(a, 'true');
    else if (flags.valued?.includes(a)) {
      const v = argv[i + 1];
      if (v === undefined || v.startsWith('--')) throw new BenchUsageError(`bench ${suite}: ${a} needs a value.`);
      out.set(a, v);
      i++;
    } else {
      const known = [...(flags.boolean ?? []), ...(flags.valued ?? [])];
      throw new BenchUsageError(
        `bench ${suite}: unknown argument ${JSON.stringify(a)}; ${known.length ? `it takes ${known.join(', ')}` : 'it takes no flags'} (--help lists them).`,
      );
    }
  }
  return out;
}
