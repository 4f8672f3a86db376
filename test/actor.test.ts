import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ActorAbortedError,
  ActorDiedError,
  ActorTimeoutError,
  InvalidArgumentError,
  registerRemoteErrorClass,
  RemoteError,
  World,
  type ActorMesh,
} from '../src/internal.js';
import { QuotaError, type Counter } from './fixtures/actors.js';

const ACTORS = new URL('./fixtures/actors.ts', import.meta.url);

describe('actors on rank workers', () => {
  let world: World;
  let counters: ActorMesh<Counter>;

  beforeAll(async () => {
    world = await World.create({ size: 4, deviceMemory: '64MiB' });
    counters = await world.spawn<Counter>({ module: ACTORS, export: 'Counter', args: [10] });
  });
  afterAll(async () => {
    await world?.shutdown();
  });

  it('call reaches every rank and returns per-rank results in rank order', async () => {
    expect(counters.ranks).toEqual([0, 1, 2, 3]);
    const totals = await counters.call('add', 5);
    expect(totals).toEqual([15, 15, 15, 15]);
    const who = await counters.call('whoAmI');
    expect(who.map((w) => w.rank)).toEqual([0, 1, 2, 3]);
    for (const w of who) {
      expect(w.worldSize).toBe(4);
      expect(w.env).toEqual({ RANK: String(w.rank), WORLD_SIZE: '4', LOCAL_RANK: String(w.rank), LOCAL_WORLD_SIZE: '4' });
      expect(w.device).toBe(w.rank);
    }
  });

  it('callOne and typed methods reach one rank only', async () => {
    expect(await counters.callOne(2, 'add', 100)).toBe(115);
    expect(await counters.call('get')).toEqual([15, 15, 115, 15]);
    expect(await counters.ref(1).methods.add(1)).toBe(16);
    expect(() => counters.ref(9)).toThrow(InvalidArgumentError);
  });

  it('broadcast sends without a reply, and a failure reaches the handler with its rank', async () => {
    const failures: Array<{ rank: number; message: string }> = [];
    world.onBroadcastError((err, rank) => failures.push({ rank, message: err.message }));
    counters.broadcast('add', 1000);
    counters.broadcast('failIfRank', 3);
    // A later call on the same ports is ordered after the broadcast.
    const totals = await counters.call('get');
    expect(totals).toEqual([1015, 1016, 1115, 1015]);
    await expect.poll(() => failures.length).toBe(1);
    expect(failures[0]).toMatchObject({ rank: 3, message: 'broadcast failure on rank 3' });
  });

  it('a factory function can be spawned on chosen ranks', async () => {
    const greeters = await world.spawn<{ greet(who: string): string }>({ module: ACTORS, export: 'makeGreeter', args: ['hello'], ranks: [3, 1] });
    expect(greeters.ranks).toEqual([1, 3]);
    expect(await greeters.call('greet', 'you')).toEqual(['hello you from rank 1', 'hello you from rank 3']);
  });

  it('spawn errors are clear', async () => {
    await expect(world.spawn({ module: './nope/missing.ts' })).rejects.toThrow(/does not exist/);
    await expect(world.spawn({ module: ACTORS, export: 'Nope' })).rejects.toThrow(/has no export "Nope" \(it exports: .*Counter/);
    await expect(world.spawn({ module: ACTORS, ranks: [4] })).rejects.toThrow(/ranks 0\.\.3/);
    await expect(world.spawn({ module: ACTORS, export: 'ThrowsInConstructor', ranks: [0] })).rejects.toThrow('constructor refused');
    await expect(world.spawn({ module: ACTORS, bogus: 1 } as never)).rejects.toThrow(/Invalid actor spec[\s\S]*bogus/);
  });

  it('a per-call timeout rejects with ActorTimeoutError and the actor stays usable', async () => {
    const ref = counters.ref(0).with({ timeoutMs: 50 });
    const err = await ref.methods.sleep(2000).catch((e) => e);
    expect(err).toBeInstanceOf(ActorTimeoutError);
    expect(err.code).toBe('ASCENT_ACTOR_TIMEOUT');
    expect(err.message).toContain('Counter.sleep on rank 0 did not answer within 50 ms');
    expect(err.rank).toBe(0);
    expect(await counters.ref(0).methods.sleep(1)).toBe('slept');
  });

  it('an AbortSignal cancels the wait, before or during the call', async () => {
    const ac = new AbortController();
    const p = counters.ref(1).invoke('sleep', [2000], { signal: ac.signal });
    setTimeout(() => ac.abort(new Error('user pressed stop')), 20);
    const err = await p.catch((e) => e);
    expect(err).toBeInstanceOf(ActorAbortedError);
    expect(err.message).toContain('user pressed stop');
    const pre = await counters
      .ref(1)
      .invoke('get', [], { signal: AbortSignal.abort('already') })
      .catch((e) => e);
    expect(pre).toBeInstanceOf(ActorAbortedError);
  });

  it('remote errors keep class, code, details, rank, actor and remote stack', async () => {
    const err = await counters.callOne(2, 'throwInvalid').catch((e) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err.code).toBe('ASCENT_INVALID_ARGUMENT');
    expect(err.details).toEqual({ batch: -1 });
    expect(err.rank).toBe(2);
    expect(err.actor).toBe('Counter');
    expect(err.remoteStack).toContain('throwInvalid');
    expect(err.stack).toContain('-- remote stack (rank 2, actor Counter) --');

    const custom = await counters.callOne(1, 'throwCustom').catch((e) => e);
    expect(custom).toBeInstanceOf(RemoteError);
    expect(custom.name).toBe('MyCustomError');
    expect(custom.code).toBe('E_CUSTOM');
    expect(custom.cause).toMatchObject({ name: 'RangeError', message: 'inner cause' });

    // A user class registered on the caller keeps instanceof (its constructor is not run).
    registerRemoteErrorClass(QuotaError);
    const quota = await counters.callOne(3, 'throwQuota').catch((e) => e);
    expect(quota).toBeInstanceOf(QuotaError);
    expect(quota).toBeInstanceOf(Error);
    expect(quota.isQuota).toBe(true);
    expect(quota).toMatchObject({ message: 'quota of 3 calls used up', code: 'E_QUOTA', rank: 3, actor: 'Counter', name: 'QuotaError' });
    expect(quota.stack).toContain('-- remote stack (rank 3, actor Counter) --');

    const str = await counters.callOne(1, 'throwString').catch((e) => e);
    expect(str.message).toContain('a bare string');
  });

  it('a misspelled method names the actor, the method and the methods it has', async () => {
    const err = await counters.callOne(2, 'ad' as never, 1).catch((e) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err.message).toMatch(/^Actor Counter on rank 2 has no method "ad" \(its methods: add, countCalls, crashLater, exit, .*get, .*whoAmI\)/);
    expect(err.details).toMatchObject({ actor: 'Counter', rank: 2, method: 'ad' });
    expect(err.message).not.toContain('apply');
    // Methods that use #private fields and getters still run on the actor itself.
    expect(await counters.callOne(3, 'countCalls')).toBe(1);
    expect(await counters.callOne(3, 'countCalls')).toBe(2);
    // Typed methods go the same way.
    await expect((counters.ref(0).methods as unknown as { nope(): Promise<void> }).nope()).rejects.toThrow(/has no method "nope"/);
  });

  it('the task pool runs stateless functions and reports their errors', async () => {
    const tasks = new URL('./fixtures/tasks.mjs', import.meta.url);
    const results = await Promise.all([1, 2, 3].map((x) => world.tasks.run<number>({ module: tasks, export: 'square' }, x)));
    expect(results).toEqual([1, 4, 9]);
    const err = await world.tasks.run({ module: tasks, export: 'explode' }, 'kaboom').catch((e) => e);
    expect(err.message).toContain('task exploded: kaboom');
    expect(err.name).toBe('TypeError');
  });
});

describe('actor death', () => {
  it('every pending call rejects at once with ActorDiedError when the worker exits', async () => {
    const world = await World.create({ size: 2, deviceMemory: '64MiB', taskPool: false });
    try {
      const m = await world.spawn<Counter>({ module: ACTORS, export: 'Counter' });
      const pending = [m.callOne(1, 'sleep', 60_000), m.callOne(1, 'sleep', 60_000)];
      void m.callOne(1, 'exit', 7).catch(() => {});
      for (const p of pending) {
        const err = await p.catch((e) => e);
        expect(err).toBeInstanceOf(ActorDiedError);
        expect(err.rank).toBe(1);
        expect(err.actor).toBe('Counter');
        expect(err.message).toContain('exited with code 7');
        expect(err.details.exitCode).toBe(7);
      }
      // Later calls fail at once; the other rank is unaffected.
      await expect(m.callOne(1, 'get')).rejects.toBeInstanceOf(ActorDiedError);
      expect(await m.callOne(0, 'add', 1)).toBe(1);
      expect(world.ranks[1]!.status).toBe('failed');
    } finally {
      await world.shutdown();
    }
  });

  it('a crash (uncaught exception) is reported with its cause', async () => {
    const world = await World.create({ size: 1, deviceMemory: '64MiB', taskPool: false });
    try {
      const m = await world.spawn<Counter>({ module: ACTORS, export: 'Counter' });
      const pending = m.callOne(0, 'sleep', 60_000);
      await m.callOne(0, 'crashLater', 'kaboom in a timer');
      const err = await pending.catch((e) => e);
      expect(err).toBeInstanceOf(ActorDiedError);
      expect(err.message).toContain('worker crashed: kaboom in a timer');
      expect(world.ranks[0]!.error?.message).toContain('kaboom in a timer');
    } finally {
      await world.shutdown();
    }
  });
});

describe('after shutdown', () => {
  it('a call fails with ActorDiedError that says the world was shut down, with no exit code', async () => {
    const world = await World.create({ size: 1, deviceMemory: '64MiB', taskPool: false });
    const m = await world.spawn<Counter>({ module: ACTORS, export: 'Counter' });
    await world.shutdown();
    const err = await m.callOne(0, 'get').catch((e) => e);
    expect(err).toBeInstanceOf(ActorDiedError);
    expect(err.message).toContain('the world was shut down');
    expect(err.details.exitCode).toBeUndefined();
    expect(err.details.terminated).toBe(true);
  });
});

describe('World options', () => {
  it('rejects bad options with a readable message', async () => {
    await expect(World.create({ size: 0 })).rejects.toThrow(/size: expected a positive integer for size/);
    await expect(World.create({ size: 2, deviceMemory: 'lots' })).rejects.toThrow(/byte size like 512MiB/);
    await expect(World.create({ size: 2, sise: 3 } as never)).rejects.toThrow(/sise/);
  });
});

describe('ASCENT_ACTOR_CALLSITES', () => {
  it('appends the caller stack to remote errors when switched on', async () => {
    const { spawnSync } = await import('node:child_process');
    const script = `
      import { World } from 'ascent';
      const world = await World.create({ size: 1, deviceMemory: '64MiB', taskPool: false });
      const m = await world.spawn({ module: ${JSON.stringify(ACTORS.href)}, export: 'Counter' });
      async function callerFrame() { return m.callOne(0, 'throwInvalid'); }
      const err = await callerFrame().catch((e) => e);
      await world.shutdown();
      console.log(JSON.stringify({ stack: err.stack }));`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      encoding: 'utf8',
      cwd: new URL('..', import.meta.url),
      env: { ...process.env, ASCENT_ACTOR_CALLSITES: '1' },
      timeout: 30_000,
    });
    expect(r.status).toBe(0);
    const { stack } = JSON.parse(r.stdout.trim().split('\n').pop()!);
    expect(stack).toContain('-- remote stack (rank 0, actor Counter) --');
    expect(stack).toContain('-- called from --');
    expect(stack).toContain('callerFrame');
  });
});
