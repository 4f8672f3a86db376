/**
 * The GRPO step's weight sync as the controller issues it (src/grpo/step-sync.ts): in server
 * mode the engine-only ranks are called before the update and the trainer ranks after it
 * (or inside the update's last call, update-sync.ts); an engine failure surfaces at
 * finish() without calling the trainers; a controller that fails in between aborts the sync
 * communicator once. Fake meshes record the calls (the end-to-end runs are in
 * grpo-scenarios.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { ActorMesh, type ActorRef } from '../src/internal.js';
import type { SyncActor, SyncCallOptions } from '../src/actors/sync.js';
import type { SyncReport } from '../src/sync/index.js';
import type { TrainerActor, TrainStepResult } from '../src/actors/trainer.js';
import type { RolloutActor } from '../src/actors/rollout.js';
import type { TrainBatch } from '../src/train/strategy.js';
import { StepSync } from '../src/grpo/step-sync.js';
import { epochMs, syncInUpdate, UpdateSyncActor } from '../src/grpo/update-sync.js';
import { policyUpdate } from '../src/grpo/update.js';

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

  it('finish(opts, joined): the trainers are already in the sync (update-sync.ts): nothing more is called; the report is the joined one once the engines finished', async () => {
    const { mesh, calls } = fakeMesh(3);
    const s = new StepSync(mesh, [0, 1], () => undefined, 1000);
    s.begin(OPTS);
    let joinedDone!: (r: SyncReport) => void;
    const joined = new Promise<SyncReport>((r) => (joinedDone = r));
    const done = s.finish(OPTS, joined);
    expect(calls.map((c) => c.rank)).toEqual([2]);
    joinedDone(report(7));
    calls[0]!.settle.resolve(report(2));
    expect((await done).bytes).toBe(7);
  });

  it('finish(opts, joined) with an engine failure: the engine error is the one reported, even when the trainers failed too', async () => {
    const { mesh, calls } = fakeMesh(3);
    const s = new StepSync(mesh, [0, 1], () => undefined, 1000);
    s.begin(OPTS);
    calls[0]!.settle.reject(new Error('engine rank 2: reload session refused'));
    await tick();
    const joined = Promise.reject(new Error('CommAbortedError: sync communicator aborted'));
    await expect(s.finish(OPTS, joined)).rejects.toThrow('engine rank 2: reload session refused');
  });
});

const result = (loss: number): TrainStepResult => ({
  loss,
  tokens: 1,
  gradNorm: loss,
  lr: 0,
  step: 1,
  ms: { forwardBackward: 0, clip: 0, optimizer: 0, total: 0, comm: 0 },
});

describe('UpdateSyncActor (the update last step and the sync in one call)', () => {
  it('runs lossSteps, then the sync with the given options, and returns both', async () => {
    const order: string[] = [];
    const trainer = {
      lossSteps: async (name: string) => (order.push(`lossSteps ${name}`), result(2)),
    } as unknown as TrainerActor;
    const syncer = { sync: async (o: SyncCallOptions) => (order.push(`sync ${JSON.stringify(o)}`), report(3)) } as unknown as SyncActor;
    const before = epochMs();
    const r = await new UpdateSyncActor(trainer, syncer).lossStepsThenSync('grpo', [], {}, OPTS);
    expect(order).toEqual(['lossSteps grpo', `sync ${JSON.stringify(OPTS)}`]);
    expect(r.step.loss).toBe(2);
    expect(r.sync.bytes).toBe(3);
    // When the update ended: between the call and now, on the clock the controller compares it with.
    expect(r.trainEndMs).toBeGreaterThanOrEqual(before);
    expect(r.trainEndMs).toBeLessThanOrEqual(epochMs());
  });

  it('records the end of the update before the sync starts (a slow sync is not training time)', async () => {
    const trainer = { lossSteps: async () => result(1) } as unknown as TrainerActor;
    let syncStarted = 0;
    const syncer = {
      sync: async () => {
        syncStarted = epochMs();
        await new Promise((r) => setTimeout(r, 30));
        return report(0);
      },
    } as unknown as SyncActor;
    const r = await new UpdateSyncActor(trainer, syncer).lossStepsThenSync('grpo', [], {}, OPTS);
    expect(r.trainEndMs).toBeLessThanOrEqual(syncStarted);
  });

  it('colocated (wake): wakes the rank own engine after the update and before the sync; without wake it is left asleep', async () => {
    const order: string[] = [];
    const trainer = { lossSteps: async () => (order.push('lossSteps'), result(1)) } as unknown as TrainerActor;
    const syncer = { sync: async () => (order.push('sync'), report(0)) } as unknown as SyncActor;
    const rollout = { wake: () => void order.push('wake') } as unknown as RolloutActor;
    await new UpdateSyncActor(trainer, syncer, rollout).lossStepsThenSync('grpo', [], {}, OPTS, true);
    expect(order).toEqual(['lossSteps', 'wake', 'sync']);
    order.length = 0;
    await new UpdateSyncActor(trainer, syncer, rollout).lossStepsThenSync('grpo', [], {}, OPTS);
    expect(order).toEqual(['lossSteps', 'sync']);
  });

  it('wake on a rank with no colocated engine fails with a hint before syncing', async () => {
    let synced = false;
    const trainer = { lossSteps: async () => result(1) } as unknown as TrainerActor;
    const syncer = { sync: async () => ((synced = true), report(0)) } as unknown as SyncActor;
    await expect(new UpdateSyncActor(trainer, syncer).lossStepsThenSync('grpo', [], {}, OPTS, true)).rejects.toThrow(/no colocated engine to wake\. HINT/);
    expect(synced).toBe(false);
  });

  it('a failed update never starts the sync (the controller cancels the engines instead)', async () => {
    let synced = false;
    const trainer = {
      lossSteps: async () => {
        throw new Error('loss is NaN');
      },
    } as unknown as TrainerActor;
    const syncer = { sync: async () => ((synced = true), report(0)) } as unknown as SyncActor;
    await expect(new UpdateSyncActor(trainer, syncer).lossStepsThenSync('grpo', [], {}, OPTS)).rejects.toThrow('loss is NaN');
    expect(synced).toBe(false);
  });
});

describe('policyUpdate(..., last)', () => {
  it('only the last optimizer step goes through `last`; the others call lossSteps on every trainer rank', async () => {
    const seen: string[] = [];
    const refs = [0, 1].map((rank) => ({
      rank,
      invoke: async (method: string, args: unknown[]) => {
        seen.push(`${method} rank ${rank} lr ${(args[2] as { lr: number }).lr}`);
        return result(1);
      },
    }));
    const trainers = new ActorMesh<TrainerActor>('trainer', refs as unknown as ActorRef<TrainerActor>[], () => undefined);
    const S = 2,
      rows = 4;
    const batch: TrainBatch = { inputIds: new Int32Array(rows * S), targets: new Int32Array(rows * S).fill(1), batch: rows, seqLen: S };
    const tokens = new Float32Array(rows * S);
    const r = await policyUpdate(
      trainers,
      { batch, advantages: new Float32Array(rows), engineLogprobs: tokens, oldLogprobs: tokens },
      {
        shape: { numIterations: 1, stepsPerGeneration: 2, gradientAccumulationSteps: 1, dp: 2 },
        loss: {} as never,
        schedule: { kind: 'constant', lr: 0.5, warmupSteps: 0, totalSteps: 10 },
        firstStep: 0,
        temperature: 1,
      },
      async (micro, o) => {
        seen.push(`last rows ${micro[0]!.batch.batch} lr ${o.lr as number}`);
        return result(3);
      },
    );
    expect(seen).toEqual(['lossSteps rank 0 lr 0.5', 'lossSteps rank 1 lr 0.5', 'last rows 2 lr 0.5']);
    expect(r.optimizerSteps).toBe(2);
    expect(r.loss).toBe(2); // mean of the two steps' losses (1 and 3)
  });
});

describe('syncInUpdate (how much of the update phase was the sync)', () => {
  it('counts from the last trainer rank to finish its update, not from rank 0', () => {
    // Phase ended at t = 1000 ms and lasted 0.2 s; rank 0 finished at 900, the slowest rank at 960.
    expect(syncInUpdate([900, 940, 960], 1000, 0.2, 0.1)).toBeCloseTo(0.04, 12);
    // Rank 0 the slowest: its own end starts the sync.
    expect(syncInUpdate([960, 900], 1000, 0.2, 0.03)).toBeCloseTo(0.04, 12);
  });

  it("falls back to rank 0's own sync time when the clocks cannot vouch for the value", () => {
    // A rank's end after the phase ended (another host's clock ahead): rank 0's side, as before.
    expect(syncInUpdate([900, 1005], 1000, 0.2, 0.03)).toBe(0.03);
    // Before the phase began (a clock behind): the same fallback, never more than the phase.
    expect(syncInUpdate([700], 1000, 0.2, 0.03)).toBe(0.03);
    expect(syncInUpdate([700], 1000, 0.2, 0.5)).toBe(0.2);
    // No ranks reported, or a missing value.
    expect(syncInUpdate([], 1000, 0.2, 0.03)).toBe(0.03);
    expect(syncInUpdate([Number.NaN], 1000, 0.2, 0.03)).toBe(0.03);
  });
});
