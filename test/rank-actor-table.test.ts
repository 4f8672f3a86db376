// A rank's actor table: a name taken off with unexpose can be exposed again (a GRPO run repeated
// in the same world does that), a waiting lookup gets the new object, and a name that was never
// exposed (or was already taken off) is a clear error.
import { describe, expect, it } from 'vitest';
import type * as Comlink from 'comlink';
import { RankActorTable } from '../src/runtime/actor-system/rank-context.js';
import type { BrokerApi } from '../src/runtime/actor-system/rank-protocol.js';
import { InvalidArgumentError, TimeoutError } from '../src/runtime/errors.js';

// expose/unexpose/lookup are local to the rank: the broker (peer connections) is never reached.
const table = () => new RankActorTable(1, 2, {} as Comlink.Remote<BrokerApi>, 1_000);

describe('RankActorTable.unexpose', () => {
  it('takes the name off, so that it can be exposed again and lookups find the new object', async () => {
    const t = table();
    const first = { v: 1 };
    const second = { v: 2 };
    t.expose('trainer', first);
    t.expose('sync', {});
    expect(() => t.expose('trainer', second)).toThrow(/already exposed on rank 1/);
    t.unexpose('trainer');
    expect(t.localNames()).toEqual(['sync']);
    // A peer connecting now waits for the next object under that name.
    const waiting = t.lookup('trainer', 5_000);
    t.expose('trainer', second);
    expect(await waiting).toBe(second);
    expect(await t.lookup('trainer', 10)).toBe(second);
    expect(t.localNames().sort()).toEqual(['sync', 'trainer']);
  });

  it('after unexpose, a lookup does not find the old object (it times out naming what is exposed)', async () => {
    const t = table();
    t.expose('rollout', { v: 1 });
    t.unexpose('rollout');
    const err = await t.lookup('rollout', 20).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    expect((err as Error).message).toContain('No actor named "rollout" was exposed on rank 1 within 20 ms (exposed here: [])');
  });

  it('a name that is not exposed is refused, saying what is', () => {
    const t = table();
    t.expose('sync', {});
    expect(() => t.unexpose('trainer')).toThrow(InvalidArgumentError);
    expect(() => t.unexpose('trainer')).toThrow('No actor named "trainer" is exposed on rank 1 (exposed here: [sync])');
    t.unexpose('sync');
    expect(() => t.unexpose('sync')).toThrow(/No actor named "sync" is exposed on rank 1 \(exposed here: \[\]\)/);
  });
});
