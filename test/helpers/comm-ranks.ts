/**
 * Runs one worker per rank of a fresh communicator (test/fixtures/comm-worker.mjs,
 * which imports dist/) and collects each rank's single result message. A worker
 * that dies or errors gets `{ exited, error }` instead; nothing here can hang past
 * `timeoutMs` (the workers are terminated).
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { expect } from 'vitest';
import { Communicator } from '../../src/runtime/comm/comm-index.js';
import { Device } from '../../src/runtime/device/device-index.js';
import { packageRoot } from '../../src/runtime/native.js';

const root = packageRoot();
const worker = join(root, 'test', 'fixtures', 'comm-worker.mjs');

function newestMtime(dir: string): number {
  return Math.max(
    ...readdirSync(dir, { recursive: true, encoding: 'utf8' })
      .filter((f) => f.endsWith('.ts'))
      .map((f) => statSync(join(dir, f)).mtimeMs),
  );
}

/** Builds dist/ when it is missing or older than src/runtime, and loads the addon in the main thread first. */
export function ensureBuilt(): void {
  const entry = join(root, 'dist', 'src', 'runtime', 'comm', 'comm-index.js');
  if (!existsSync(entry) || statSync(entry).mtimeMs < newestMtime(join(root, 'src', 'runtime'))) {
    spawnSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(root, 'tsconfig.json')], { stdio: 'inherit' });
  }
  Device.get(0);
}

export interface RankResult {
  rank: number;
  exited?: number;
  error?: string;
  [key: string]: unknown;
}

/**
 * `onStart(id)` runs once every worker was started (e.g. to abort the communicator from the main thread).
 * `fixture`: the worker script under test/fixtures (default comm-worker.mjs).
 */
export async function runRanks(
  nranks: number,
  data: Record<string, unknown>,
  timeoutMs = 50_000,
  onStart?: (id: string, workers: Worker[]) => void,
  fixture?: string,
): Promise<RankResult[]> {
  const id = Communicator.uniqueId();
  const workers: Worker[] = [];
  const script = fixture === undefined ? worker : join(root, 'test', 'fixtures', fixture);
  const all = Promise.all(
    Array.from({ length: nranks }, (_, rank) => {
      const w = new Worker(script, { workerData: { id, nranks, rank, ...data } });
      workers.push(w);
      return new Promise<RankResult>((resolve) => {
        let done = false;
        const finish = (r: RankResult) => {
          if (!done) {
            done = true;
            resolve(r);
          }
        };
        w.on('message', (m: { type: string }) => {
          if (m.type === 'result') finish(m as unknown as RankResult);
        });
        w.on('error', (e) => finish({ rank, error: String(e?.stack ?? e) }));
        w.on('exit', (code) => finish({ rank, exited: code }));
      });
    }).map((p) => Promise.race([p, new Promise<RankResult>((resolve) => setTimeout(() => resolve({ rank: -1, error: 'timeout' }), timeoutMs).unref())])),
  );
  onStart?.(id, workers);
  const results = await all;
  await Promise.all(workers.map((w) => w.terminate()));
  return results;
}

/** The error a rank reported (as the comm worker fixture serialises it). */
export interface ErrInfo {
  name: string;
  code: string;
  message: string;
  details: Record<string, unknown>;
}

/** The error rank `r` stored under `key`; fails the test when the rank crashed or reported none. */
export function rankError(r: RankResult, key = 'err'): ErrInfo {
  expect(r.error, `rank ${r.rank} crashed`).toBeUndefined();
  const e = r[key] as ErrInfo | null;
  expect(e, `rank ${r.rank} has no ${key}`).toBeTruthy();
  return e!;
}

/** Runs a named fault scenario of the comm worker fixture on `nranks` ranks, dumping traces into `traceDir`. */
export function runScenario(traceDir: string, nranks: number, name: string, extra: Record<string, unknown> = {}): Promise<RankResult[]> {
  return runRanks(nranks, { mode: 'scenario', scenario: name, traceDir, ...extra });
}

/**
 * Runs the fixture's 'abortById' scenario on `nranks` ranks and, from this (main) thread,
 * aborts their communicator by id with `reason` / `culprits`. The group exists only once the
 * ranks have joined (slow on a loaded machine), so the abort is retried, bounded at 20 s.
 */
export function runAbortById(nranks: number, traceDir: string, reason: string, culprits?: number[]): Promise<RankResult[]> {
  return runRanks(nranks, { mode: 'scenario', scenario: 'abortById', traceDir }, 50_000, (id, workers) => {
    // Abort once every rank has joined the group and passed its barrier (each posts
    // 'waiting'): aborting earlier would leave a late rank to make a fresh group alone.
    let waiting = 0;
    const abort = () => {
      if (!(culprits ? Communicator.abortById(id, reason, culprits) : Communicator.abortById(id, reason)))
        throw new Error('abortById: no communicator group with this id');
    };
    for (const w of workers) {
      w.on('message', (m: { type: string }) => {
        if (m.type === 'waiting' && ++waiting === nranks) setTimeout(abort, 100);
      });
    }
  });
}
