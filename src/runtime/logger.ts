/**
 * Rank-prefixed logger. Under `launch` and a World with output prefixing, the
 * parent already prefixes every line a rank prints, so the logger does not add a
 * second prefix; elsewhere it writes `[rank N]` itself.
 */
import { format } from 'node:util';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface Logger {
  debug(...args: unknown[]): void;
  info(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
  /** Logs at info level on rank 0 only (the leader). */
  leader(...args: unknown[]): void;
}

export function rankPrefix(rank: number): string {
  return `[rank ${rank}]`;
}

export function createLogger(rank: number, opts: { prefixed: boolean; debug?: boolean }): Logger {
  const prefix = opts.prefixed ? '' : `${rankPrefix(rank)} `;
  const write = (stream: NodeJS.WriteStream, level: LogLevel, args: unknown[]) => {
    const tag = level === 'info' ? '' : `${level.toUpperCase()} `;
    stream.write(`${prefix}${tag}${format(...args)}\n`);
  };
  return {
    debug: (...a) => {
      if (opts.debug) write(process.stdout, 'debug', a);
    },
    info: (...a) => write(process.stdout, 'info', a),
    warn: (...a) => write(process.stderr, 'warn', a),
    error: (...a) => write(process.stderr, 'error', a),
    leader: (...a) => {
      if (rank === 0) write(process.stdout, 'info', a);
    },
  };
}
