/**
 * Forwards a rank worker's stdout/stderr line by line, prefixed with the rank,
 * to this process's streams; optionally only for some ranks. Keeps the last line
 * each rank printed (for reports on stuck or failed ranks).
 */
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { rankPrefix } from './logger.js';

export interface RankOutputOptions {
  prefix: boolean;
  ranks: 'all' | number[];
}

export class RankOutput {
  lastLine: string | undefined;
  lastLineAt: number | undefined;
  private open = 0;
  private readonly drained: Promise<void>;
  private resolveDrained!: () => void;

  constructor(
    readonly rank: number,
    stdout: Readable,
    stderr: Readable,
    private readonly opts: RankOutputOptions,
  ) {
    this.drained = new Promise((r) => (this.resolveDrained = r));
    this.pipe(stdout, process.stdout);
    this.pipe(stderr, process.stderr);
  }

  private get shown(): boolean {
    return this.opts.ranks === 'all' || this.opts.ranks.includes(this.rank);
  }

  private pipe(src: Readable, dst: NodeJS.WriteStream): void {
    this.open++;
    const prefix = this.opts.prefix ? `${rankPrefix(this.rank)} ` : '';
    const rl = createInterface({ input: src, crlfDelay: Infinity });
    rl.on('line', (line) => {
      this.lastLine = line;
      this.lastLineAt = Date.now();
      if (this.shown) dst.write(`${prefix}${line}\n`);
    });
    rl.on('close', () => {
      if (--this.open === 0) this.resolveDrained();
    });
  }

  /** Resolves when both streams ended (the worker exited and its output was flushed). */
  whenDrained(): Promise<void> {
    return this.drained;
  }
}
