/**
 * Server-mode LoRA adapter sync: only the adapters travel. The trainer group gathers
 * its adapters (the strategy's adapter sources, parallel/adapter-sources.ts: gather() is
 * collective over the trainers); trainer rank 0
 * broadcasts over the sync communicator a small header (targets, shapes, scaling;
 * JSON packed in int32 words) and then each A and B; the engine ranks rewrite the
 * affected runtime parameters as base + scaling·B·A (rollout/lora.ts). No full reload,
 * no post-load processing.
 */
import type { Communicator } from '../runtime/comm/comm.js';
import { Tensor, type Stream } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import type { HostParam } from '../model/param-store.js';
import type { RolloutEngine } from '../rollout/engine.js';
import { applyEngineAdapters } from '../rollout/lora.js';
import type { TrainStrategy } from '../train/strategy.js';

interface Header {
  scaling: number;
  targets: Array<{ base: string; a: string; b: string; shapeA: number[]; shapeB: number[] }>;
}

const WAIT = { timeoutMs: 300_000 };

/** Rank 0's header to every rank: its length first, then the JSON bytes packed in int32 words. */
async function broadcastHeader(comm: Communicator, stream: Stream, header: Header | null): Promise<Header> {
  const device = comm.device;
  const bytes = header ? new TextEncoder().encode(JSON.stringify(header)) : null;
  const len = Tensor.fromArray(device, new Int32Array([bytes?.length ?? 0]), [1], { stream });
  let n: number;
  try {
    await comm.broadcast(len, len, 0, stream);
    n = ((await len.toArray({ stream, ...WAIT })) as Int32Array)[0]!;
  } finally {
    len.release();
  }
  const words = new Int32Array(Math.ceil(n / 4));
  if (bytes) new Uint8Array(words.buffer).set(bytes);
  const t = Tensor.fromArray(device, words, [words.length], { stream });
  try {
    await comm.broadcast(t, t, 0, stream);
    const got = new Uint8Array(((await t.toArray({ stream, ...WAIT })) as Int32Array).buffer, 0, n);
    return JSON.parse(new TextDecoder().decode(got)) as Header;
  } finally {
    t.release();
  }
}

/** Collective over `comm` (trainers first, rank 0 a trainer). Returns the bytes and tensors sent. */
export async function serverAdapterSync(opts: {
  comm: Communicator;
  stream: Stream;
  strategy?: TrainStrategy;
  engine?: RolloutEngine;
}): Promise<{ bytes: number; tensors: number }> {
  const { comm, stream, strategy, engine } = opts;
  let host: Map<string, HostParam> | null = null;
  let header: Header | null = null;
  if (strategy) {
    const adapters = strategy.adapterSources();
    if (!adapters) {
      throw new InvalidArgumentError(
        `ServerSync.sync({ adapterOnly: true }): the ${strategy.kind} strategy has no LoRA adapters. HINT: create it with { lora }, or run a full sync.`,
      );
    }
    host = await adapters.gather(); // collective over the trainer group
    if (comm.rank === 0) {
      header = {
        scaling: adapters.scaling,
        targets: adapters.targets.map((t) => ({ base: t.base, a: t.a, b: t.b, shapeA: [...host!.get(t.a)!.shape], shapeB: [...host!.get(t.b)!.shape] })),
      };
    }
  }
  const h = await broadcastHeader(comm, stream, header);
  const device = comm.device;
  const list: Array<{ base: string; a: Tensor; b: Tensor }> = [];
  let bytes = 0;
  try {
    for (const t of h.targets) {
      const pair: Tensor[] = [];
      for (const [name, shape] of [
        [t.a, t.shapeA],
        [t.b, t.shapeB],
      ] as const) {
        const x = comm.rank === 0 ? Tensor.fromArray(device, host!.get(name)!.data, shape, { stream }) : Tensor.empty(device, shape, 'fp32');
        pair.push(x);
        await comm.broadcast(x, x, 0, stream);
        bytes += x.nbytes;
      }
      list.push({ base: t.base, a: pair[0]!, b: pair[1]! });
    }
    if (engine) {
      applyEngineAdapters(engine, list, h.scaling);
      await engine.stream.synchronize(WAIT);
    }
    await stream.synchronize(WAIT);
  } finally {
    for (const x of list) {
      x.a.release();
      x.b.release();
    }
  }
  return { bytes, tensors: list.length * 2 };
}
