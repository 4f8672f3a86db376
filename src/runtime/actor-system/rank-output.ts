/**
 * Forwards a rank worker's stdout/stderr line by line, prefixed with the rank,
 * to this process's streams; optionally only for some ranks. Keeps the last line
 * each rank printed (for reports on stuck or failed ranks).
 */
import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { rankPrefix } from '../logger.js';

export interface RankOutputOptions {
  prefix: boolean;
  ranks: 'all' | number[];
  /** Also write every line to `<logDir>/rank-<N>.log`. */
  logDir?: string | undefined;
  /** Ranks whose stderr goes to the terminal raw (live displays redraw in place). */
  terminal?: { ranks: number[] } | undefined;
}

export class RankOutput {
  lastLine: string | undefined;
  lastLineAt: number | undefined;
  private open = 0;
  private file: WriteStream | undefined;
  private readonly drained: Promise<void>;
  private resolveDrained!: () => void;

  constructor(
    readonly rank: number,
    stdout: Readable,
    stderr: Readable,
    private readonly opts: RankOutputOptions,
  ) {
    this.drained = new Promise((r) => (this.resolveDrained = r));
    if (opts.logDir) {
      mkdirSync(opts.logDir, { recursive: true });
      this.file = createWriteStream(join(opts.logDir, `rank-${rank}.log`));
    }
    this.pipe(stdout, process.stdout);
    if (opts.terminal?.ranks.includes(rank) && this.shown) this.pipeRaw(stderr, process.stderr);
    else this.pipe(stderr, process.stderr);
  }

  /** Chunks as they come, unprefixed: a progress bar's carriage returns and escapes reach the terminal. */
  private pipeRaw(src: Readable, dst: NodeJS.WriteStream): void {
    this.open++;
    src.on('data', (chunk: Buffer) => {
      dst.write(chunk);
      this.file?.write(chunk);
      // eslint-disable-next-line no-control-regex -- ANSI escape sequences (ESC) are what is stripped
      const text = String(chunk).replace(/\x1b\[[0-9;?]*[A-Za-z]|\x1b[78]/g, '');
      const last = text
        .split(/[\r\n]/)
        .filter((l) => l.trim() !== '')
        .pop();
      if (last !== undefined) {
        this.lastLine = last;
        this.lastLineAt = Date.now();
      }
    });
    // 'end' and 'close' may both fire; count the stream once.
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      this.streamEnded();
    };
    src.on('end', end);
    src.on('close', end);
  }

  private streamEnded(): void {
    if (--this.open > 0) return;
    if (this.file) this.file.end(() => this.resolveDrained());
    else this.resolveDrained();
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
      this.file?.write(`${line}\n`);
    });
    rl.on('close', () => this.streamEnded());
  }

  /** Resolves when both streams ended (the worker exited and its output was flushed). */
  whenDrained(): Promise<void> {
    return this.drained;
  }
}
