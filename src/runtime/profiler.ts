/**
 * The profiler. With `ASCENT_PROFILE=<dir>` every thread that runs Ascent work records:
 *   - every op each of its streams runs (kernels, copies, collectives, with the time a
 *     collective spent waiting for its peers), timed on the stream's own thread;
 *   - host waits on the device (synchronize, reads back), as async spans;
 *   - actor calls, on the caller (the round trip) and on the callee (the method's run).
 * At the end of a rank (or of the main thread) the records are written as a Chrome trace
 * (`<dir>/rank-<R>.trace.json`, one process per rank, one track per stream); `ascent
 * profile <dir>` merges them into `<dir>/trace.json` (open it in https://ui.perfetto.dev)
 * and prints the top ops by time. Off (the default) it costs one branch per stream op.
 *
 * Timestamps are steady-clock microseconds from the native addon (Stream.nowUs()), the
 * same clock on every thread of the process, so ranks line up on one timeline.
 */
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isMainThread } from 'node:worker_threads';
import { envInt, envString } from './env.js';
import { loadNative, type NativeStream } from './native.js';

/** A Chrome trace event (the subset written here). */
export interface TraceEvent {
  name: string;
  cat: string;
  ph: 'X' | 'b' | 'e' | 'M';
  ts: number;
  dur?: number;
  pid: number;
  tid: number;
  id?: number;
  args?: Record<string, unknown>;
}

/** Track ids inside a rank's process: host spans and actor calls; streams use 100 + stream id. */
export const HOST_TID = 1;
export const ACTOR_TID = 2;
export const STREAM_TID_BASE = 100;
/** The process id of a thread that is not a rank (the launcher's or a program's main thread). */
export const MAIN_PID = 10_000;

export class Profiler {
  private readonly streams = new Map<NativeStream, { id: number; device: number }>();
  private readonly events: TraceEvent[] = [];
  private nextId = 1;
  private dropped = 0;
  readonly pid: number;

  constructor(
    readonly dir: string,
    rank: number | undefined,
  ) {
    this.pid = rank ?? MAIN_PID;
  }

  now(): number {
    return loadNative().Stream.nowUs();
  }

  /** Starts recording the ops of `stream`. */
  trackStream(stream: NativeStream): void {
    if (this.streams.has(stream)) return;
    stream.profile(true);
    this.streams.set(stream, { id: stream.id, device: stream.device });
  }

  /** Collects a stream's records now (before it is destroyed) and forgets it. */
  releaseStream(stream: NativeStream): void {
    if (!this.streams.has(stream)) return;
    this.drain(stream);
    this.streams.delete(stream);
  }

  /** An async span (may overlap others): returns the function that ends it. */
  begin(cat: 'sync' | 'actor', name: string, args?: Record<string, unknown>): () => void {
    // Unique over every process of a merged trace (async spans pair by id).
    const id = this.pid * 1_000_000_000 + this.nextId++;
    const tid = cat === 'actor' ? ACTOR_TID : HOST_TID;
    this.events.push({ name, cat, ph: 'b', ts: this.now(), pid: this.pid, tid, id, ...(args ? { args } : {}) });
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.events.push({ name, cat, ph: 'e', ts: this.now(), pid: this.pid, tid, id });
    };
  }

  private drain(stream: NativeStream): void {
    const meta = this.streams.get(stream)!;
    let r: ReturnType<NativeStream['drainProfile']>;
    try {
      r = stream.drainProfile();
    } catch {
      return; // a destroyed stream's records are gone with it
    }
    this.dropped += r.dropped;
    const tid = STREAM_TID_BASE + meta.id;
    for (let i = 0; i < r.names.length; i++) {
      const name = r.names[i]!;
      const extra = r.args[i];
      this.events.push({
        name,
        cat: opCategory(name),
        ph: 'X',
        ts: r.start[i]!,
        dur: Math.max(0, r.end[i]! - r.start[i]!),
        pid: this.pid,
        tid,
        args: { seq: r.seq[i]!, device: meta.device, ...extra },
      });
    }
  }

  /** The trace so far (streams drained): metadata first, then events by time. */
  trace(): { traceEvents: TraceEvent[]; otherData: Record<string, unknown> } {
    for (const s of this.streams.keys()) this.drain(s);
    const meta: TraceEvent[] = [
      {
        name: 'process_name',
        cat: '__metadata',
        ph: 'M',
        ts: 0,
        pid: this.pid,
        tid: 0,
        args: { name: this.pid === MAIN_PID ? 'main thread' : `rank ${this.pid}` },
      },
      { name: 'process_sort_index', cat: '__metadata', ph: 'M', ts: 0, pid: this.pid, tid: 0, args: { sort_index: this.pid } },
      { name: 'thread_name', cat: '__metadata', ph: 'M', ts: 0, pid: this.pid, tid: HOST_TID, args: { name: 'host waits' } },
      { name: 'thread_name', cat: '__metadata', ph: 'M', ts: 0, pid: this.pid, tid: ACTOR_TID, args: { name: 'actor calls' } },
    ];
    const tids = new Set(this.events.filter((e) => e.tid >= STREAM_TID_BASE).map((e) => e.tid));
    for (const tid of tids)
      meta.push({ name: 'thread_name', cat: '__metadata', ph: 'M', ts: 0, pid: this.pid, tid, args: { name: `stream ${tid - STREAM_TID_BASE}` } });
    const events = [...this.events].sort((a, b) => a.ts - b.ts);
    return { traceEvents: [...meta, ...events], otherData: { rank: this.pid, droppedOps: this.dropped } };
  }

  /** Writes `<dir>/rank-<R>.trace.json` (`main.trace.json` off the ranks), atomically; returns its path. */
  flush(): string {
    mkdirSync(this.dir, { recursive: true });
    const file = join(this.dir, `${this.pid === MAIN_PID ? 'main' : `rank-${this.pid}`}.trace.json`);
    const tmp = `${file}.tmp-${process.pid}-${this.pid}`;
    writeFileSync(tmp, JSON.stringify(this.trace()));
    renameSync(tmp, file);
    return file;
  }
}

/** Trace category of a stream op by name. */
export function opCategory(name: string): string {
  if (/^(allReduce|allGather|reduceScatter|broadcast|allToAll|send|recv|barrier|split|reduce)/i.test(name)) return 'collective';
  if (/^copy|^memcpy/i.test(name)) return 'copy';
  if (/^(marker|recordEvent|waitEvent|sleep|fail)$/.test(name)) return 'sync';
  return 'kernel';
}

let active: Profiler | null | undefined;

/** This thread's profiler when ASCENT_PROFILE is set, else null. */
export function profiler(): Profiler | null {
  if (active === undefined) {
    const dir = envString('ASCENT_PROFILE');
    active = dir ? new Profiler(dir, envInt('RANK')) : null;
    if (active && isMainThread) {
      const p = active;
      process.once('exit', () => {
        try {
          p.flush();
        } catch (err) {
          process.stderr.write(`ascent: could not write the profile to ${p.dir}: ${(err as Error).message}\n`);
        }
      });
    }
  }
  return active;
}

/** Writes this thread's trace file when profiling (a rank calls it as it finishes). */
export function flushProfile(): void {
  const p = profiler();
  if (!p) return;
  try {
    p.flush();
  } catch (err) {
    process.stderr.write(`ascent: could not write the profile to ${p.dir}: ${(err as Error).message}\n`);
  }
}
