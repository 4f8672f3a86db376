/**
 * The GRPO step's weight sync as the controller issues it (src/grpo/step-sync.ts): in server
 * mode the engine-only ranks are called before the update and the trainer ranks after it;
 * an engine failure surfaces at finish() without calling the trainers; a controller that
 * fails in between aborts the sync communicator once. A fake mesh records the calls (the
 * end-to-end runs are in grpo-scenarios.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { ActorMesh, type ActorRef } from '../src/internal.js';
import type { SyncActor, SyncCallOptions } from '../src/actors/sync.js';
import type { SyncReport } from '../src/sync/index.js';
import { StepSync } from '../src/grpo/step-sync.js';

interface Call {
  rank: number;
  opts: SyncCallOptions;
  settle: { resolve: (r: SyncReport) => void; reject: (e: Error) => void };
}

function fakeMesh(world: number): { mesh: ActorMesh<SyncActor>; calls: Call[] } {
  const calls: Call[] = [];
  const refs = Array.from({ length: world }, (_, rank) => ({
    rank,
    invoke: (method: string, args: unknown[]) => {
      expect(method).toBe('sync');
      return new Promise<SyncReport>((resolve, reject) => calls.push({ rank, opts: args[0] as SyncCallOptions, settle: { resolve, reject } }));
    },
  }));
  const mesh = new ActorMesh<SyncActor>('sync', refs as unknown as ActorRef<SyncActor>[], () => undefined);
  return { mesh, calls };
}

const report = (rank: number) => ({ bytes: rank, GBs: 0, seconds: 0, peakExtraBytes: 0, tensors: rank, mode: 'server', kind: 'full' }) as unknown as SyncReport;
const OPTS: SyncCallOptions = { verify: false, adapterOnly: false };
const tick = () => new Promise((r) => setImmediate(r));

describe('StepSync (the GRPO step weight sync)', () => {
  it('server mode: begin() calls only the engine-only ranks, finish() the trainer ranks, with the same options; the report is rank 0s', async () => {
    const { mesh, calls } = fakeMesh(4);
    const aborts: string[] = [];
    const s = new StepSync(mesh, [0, 1], (r) => aborts.push(r), 1000);
    expect(s.early).toEqual([2, 3]);
    s.begin(OPTS);
    expect(s.pending).toBe(true);
    expect(calls.map((c) => c.rank)).toEqual([2, 3]);
    const done = s.finish({ verify: false, adapterOnly: true });
    expect(calls.map((c) => c.rank)).toEqual([2, 3, 0, 1]);
    // The trainers get what the engines got at begin() (one sync, one set of options).
    for (const c of calls) expect(c.opts).toBe(OPTS);
    for (const c of calls) c.settle.resolve(report(c.rank));
    expect((await done).bytes).toBe(0);
    expect(s.pending).toBe(false);
    s.cancel('late');
    expect(aborts).toEqual([]);
  });

  it('finish() waits for the engine ranks too', async () => {
    const { mesh, calls } = fakeMesh(3);
    const s = new StepSync(mesh, [0], () => undefined, 1000);
    s.begin(OPTS);
    let finished = false;
    const done = s.finish(OPTS).then((r) => ((finished = true), r));
    calls.find((c) => c.rank === 0)!.settle.resolve(report(0));
    calls.find((c) => c.rank === 1)!.settle.resolve(report(1));
    await tick();
    expect(finished).toBe(false);
    calls.find((c) => c.rank === 2)!.settle.resolve(report(2));
    expect((await done).tensors).toBe(0);
  });

  it('colocated (every rank trains): begin() calls nothing, finish() calls every rank', async () => {
    const { mesh, calls } = fakeMesh(2);
    const s = new StepSync(mesh, [0, 1], () => undefined, 1000);
    expect(s.early).toEqual([]);
    s.begin(OPTS);
    expect(calls).toHaveLength(0);
    expect(s.pending).toBe(false);
    const done = s.finish(OPTS);
    expect(calls.map((c) => c.rank)).toEqual([0, 1]);
    for (const c of calls) c.settle.resolve(report(c.rank));
    expect((await done).bytes).toBe(0);
  });

  it('an engine rank that failed before finish(): finish() throws its error and never calls the trainers', async () => {
    const { mesh, calls } = fakeMesh(3);
    const s = new StepSync(mesh, [0, 1], () => undefined, 1000);
    s.begin(OPTS);
    calls[0]!.settle.reject(new Error('engine rank 2: no room for the slots'));
    await tick();
    await expect(s.finish(OPTS)).rejects.toThrow('engine rank 2: no room for the slots');
    expect(calls.map((c) => c.rank)).toEqual([2]);
  });

  it('cancel() while engines wait aborts the sync communicator once, with the reason; without a pending sync it does nothing', async () => {
    const { mesh, calls } = fakeMesh(3);
    const aborts: string[] = [];
    const s = new StepSync(mesh, [0, 1], (r) => aborts.push(r), 1000);
    s.cancel('nothing pending');
    expect(aborts).toEqual([]);
    s.begin(OPTS);
    s.cancel('controller failed in the update');
    s.cancel('again');
    expect(aborts).toEqual(['controller failed in the update']);
    // The aborted engine call rejects; nothing is left unhandled.
    calls[0]!.settle.reject(new Error('CommAbortedError: controller failed in the update'));
    await tick();
    expect(s.pending).toBe(false);
  });

  it('begin() twice without finish() is an error with a hint; rank 0 must be a trainer rank', () => {
    const { mesh } = fakeMesh(3);
    const s = new StepSync(mesh, [0], () => undefined, 1000);
    s.begin(OPTS);
    expect(() => s.begin(OPTS)).toThrow(/already in a sync.*HINT/);
    expect(() => new StepSync(mesh, [1, 2], () => undefined, 1000)).toThrow(/rank 0 \(the controller\) must be a trainer rank/);
  });
});
