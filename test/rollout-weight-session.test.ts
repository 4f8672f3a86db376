/**
 * The rollout engine's weight sessions (tp = 1, in process, tiny dense and MoE): a reload
 * session, whole or streamed in ranges (zero-copy targets where contiguous), gives the
 * host packing and the trainer's greedy tokens; a session finishes once and refuses every
 * call after it; one session is open at a time and generation, scoring and sleep wait for
 * it; a direct session has no processing step; a colocated sync or an adapter sync that
 * fails mid-way leaves no session open, so the next sync runs.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { Tensor } from '../src/runtime/device/tensor.js';
import { copy } from '../src/runtime/device/ops.js';
import { viewOf } from '../src/runtime/device/views.js';
import { InternalError, InvalidArgumentError, InvalidStateError, WeightLayoutError } from '../src/runtime/errors.js';
import { initialParams } from '../src/model/params.js';
import { RolloutEngine, applyEngineAdapters } from '../src/rollout/index.js';
import { DirectSession, ReloadSession } from '../src/rollout/weight-session.js';
import { SingleDeviceStrategy } from '../src/train/single.js';
import { ColocateSync } from '../src/sync/index.js';
import { cfgOf, expectedChecksums, expectedRuntime, prompts, Reference } from './helpers/rollout-reference.js';

const device = Device.get(0);

function caught(fn: () => unknown): any {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new Error('expected a throw');
}

describe.each(['dense', 'moe'] as const)('rollout weight sessions, tiny %s', (which) => {
  const cfg = cfgOf(which);
  const host = initialParams(cfg, 7);
  const owned: Array<{ release(): void }> = [];
  const make = () => {
    const e = RolloutEngine.create(cfg, { device });
    owned.push(e);
    return e;
  };
  afterEach(() => {
    for (const x of owned.splice(0)) x.release();
  });
  const want = expectedChecksums(cfg, host, 1, 0);
  const checksums = async (e: RolloutEngine) => Object.fromEntries([...(await e.checksums())].map(([n, c]) => [n, c.checksum]));

  it('a reload streamed in ranges (zero-copy targets where contiguous) equals the host packing and the trainer greedy tokens', async () => {
    const e = make();
    const reload = e.beginReload();
    const pieces: Tensor[] = [];
    let targets = 0;
    for (const [name, p] of host) {
      const full = Tensor.fromArray(device, p.data, [p.data.length], { stream: e.stream });
      pieces.push(full);
      expect(reload.entry(name).shape).toEqual([...p.shape]);
      // First half through target() when it is one contiguous region, else loadRange(); second half loadRange().
      const half = Math.floor(p.data.length / 2);
      const dst = half ? reload.target(name, 0, half) : null;
      if (dst) {
        copy(dst, viewOf(full, [half]), { stream: e.stream });
        targets++;
      } else if (half) reload.loadRange(name, viewOf(full, [half]), 0);
      reload.loadRange(name, viewOf(full, [p.data.length - half], half), half);
      reload.loadDone(name);
    }
    expect(targets).toBeGreaterThan(0);
    reload.finish();
    for (const t of pieces) t.release();
    expect(reload.open).toBe(false);
    expect(await checksums(e)).toEqual(want);
    const ref = Reference.create(cfg, 7);
    try {
      const ps = prompts(3, 11);
      const r = await e.generate(ps, { maxTokens: 5, temperature: 0 });
      for (let b = 0; b < ps.length; b++) expect(r.tokens[b]).toEqual(await ref.greedy(ps[b]!, 5));
    } finally {
      ref.release();
    }
  });

  it('a finished session refuses a second finish() and every other call, with a HINT to open a new one', () => {
    const e = make();
    const reload = e.beginReload();
    reload.load(host);
    reload.finish();
    const before = e.layoutStates();
    const twice = caught(() => reload.finish());
    expect(twice).toBeInstanceOf(InvalidStateError);
    expect(twice.message).toContain('ReloadSession.finish() called after the session was closed by finish()');
    expect(twice.message).toContain('HINT: a session is used once; open a new one with engine.beginReload()');
    const name = 'model.norm.weight';
    const piece = Tensor.fromArray(device, new Float32Array(4), [4]);
    owned.push(piece);
    for (const call of [
      () => reload.load([[name, host.get(name)!]]),
      () => reload.loadRange(name, piece, 0),
      () => reload.loadDone(name),
      () => reload.loadLocalRange(name, piece, 0, []),
      () => reload.loadLocalDone(name),
      () => reload.target(name, 0, 4),
      () => reload.entry(name),
      () => reload.abort(),
    ])
      expect(caught(call)).toBeInstanceOf(InvalidStateError);
    expect(e.layoutStates()).toEqual(before);

    const direct = e.beginDirect();
    direct.abort();
    for (const call of [
      () => direct.write(name, { shape: [cfg.hiddenSize], data: new Float32Array(cfg.hiddenSize) }),
      () => direct.writeInPlace(name, () => undefined),
      () => direct.finish(),
      () => direct.abort(),
    ]) {
      const err = caught(call);
      expect(err).toBeInstanceOf(InvalidStateError);
      expect(err.message).toContain('closed by abort(). HINT: a session is used once; open a new one with engine.beginDirect()');
    }
  });

  it('only one session is open at a time; generate, computeLogprobs, prefillLogits and sleep refuse while one is', async () => {
    const e = make();
    const reload = e.beginReload();
    for (const begin of [() => e.beginReload(), () => e.beginDirect()]) {
      const err = caught(begin);
      expect(err).toBeInstanceOf(InvalidStateError);
      expect(err.message).toContain('called while a reload session (beginReload()) is open. HINT: finish() it first');
    }
    reload.load(host);
    const ps = prompts(2);
    for (const call of [() => e.generate(ps, { maxTokens: 2 }), () => e.computeLogprobs(ps, { temperature: 1 }), () => e.prefillLogits(ps)]) {
      const err = caught(call);
      expect(err).toBeInstanceOf(InvalidStateError);
      expect(err.details).toEqual({ session: 'ReloadSession' });
    }
    await expect(e.sleep(1)).rejects.toThrow(/sleep\(\) called while a reload session \(beginReload\(\)\) is open/);
    reload.finish();

    const direct = e.beginDirect();
    expect(caught(() => e.beginReload()).message).toContain('a direct session (beginDirect()) is open');
    expect(caught(() => e.generate(ps, { maxTokens: 2 })).details).toEqual({ session: 'DirectSession' });
    direct.finish();
    const r = await e.generate(ps, { maxTokens: 2, temperature: 0 });
    expect(r.tokens.map((t) => t.length)).toEqual([2, 2]);

    // The other way round: no session opens while a generate() runs or the engine sleeps.
    const running = e.generate(ps, { maxTokens: 2 });
    expect(caught(() => e.beginDirect()).message).toContain('beginDirect() called while generate() is running');
    await running;
    await e.sleep(1);
    expect(caught(() => e.beginReload()).message).toContain('asleep');
    e.wake();
  });

  it('a direct session has no processing step: its finish() only closes, leaving processed bytes as written', async () => {
    expect(Object.getOwnPropertyNames(DirectSession.prototype).sort()).toEqual(['constructor', 'finish', 'write', 'writeInPlace']);
    expect(Object.getOwnPropertyNames(ReloadSession.prototype)).toContain('finish');
    const e = make();
    // On fresh (dropped) weights a reload's finish() is refused (nothing loaded), a direct one's is not.
    const reload = e.beginReload();
    expect(caught(() => reload.finish())).toBeInstanceOf(WeightLayoutError);
    reload.abort();
    const empty = e.beginDirect();
    empty.finish();
    expect(new Set(e.layoutStates().values())).toEqual(new Set(['dropped']));
    // Every parameter written in the processed layout: the bytes are the host packing, not processed again.
    const direct = e.beginDirect();
    for (const [n, data] of expectedRuntime(cfg, host, 1, 0)) direct.write(n, { shape: e.params.get(n).spec.procShape, data });
    direct.finish();
    expect(await checksums(e)).toEqual(want);
  });

  it('a colocated sync that fails mid-way leaves no session open: the next sync runs and verifies', async () => {
    const s = SingleDeviceStrategy.create(cfg, device, host);
    owned.push(s);
    const e = make();
    const sync = new ColocateSync({ strategy: s, engine: e });
    const begin = e.beginDirect.bind(e);
    let opened: DirectSession | null = null;
    e.beginDirect = () => {
      const session = (opened = begin());
      const write = session.writeInPlace.bind(session);
      let n = 0;
      session.writeInPlace = (name, fn) => {
        if (++n === 5) throw new InternalError('injected write failure');
        write(name, fn);
      };
      return session;
    };
    await expect(sync.sync()).rejects.toThrow('injected write failure');
    expect(opened!.open).toBe(false);
    e.beginDirect = begin;
    const report = await sync.sync({ verify: { probe: { ids: prompts(2), temperature: 1 }, tolerance: 1e-4 } });
    expect(report.verified!.maxLogprobDiff).toBeLessThan(1e-4);
    expect(await checksums(e)).toEqual(want);
  });

  it('an adapter sync that fails inside its session aborts it', () => {
    const e = make();
    const a = Tensor.zeros(device, [4, cfg.hiddenSize], 'fp32');
    const b = Tensor.zeros(device, [cfg.numHeads * cfg.headDim, 4], 'fp32');
    owned.push(a, b);
    // No base weights yet (never synced): refused inside the session.
    const err = caught(() => applyEngineAdapters(e, [{ base: 'model.layers.0.self_attn.q_proj.weight', a, b }], 2));
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err.message).toContain('needs its base weights first');
    const next = e.beginReload(); // the engine has no open session
    next.abort();
  });
});
