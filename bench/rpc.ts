/**
 * `npm run bench -- rpc`: latency of one request/reply to a rank worker through
 * (1) raw postMessage, (2) raw Comlink, (3) an Ascent actor call (Comlink + timeout,
 * abort, death tracking and error framing), on the same worker, interleaved in
 * rounds so that drift on a shared machine hits all three alike.
 */
import { MessageChannel } from 'node:worker_threads';
import * as Comlink from 'comlink';
import { World } from '../src/internal.js';
import type { RpcBench } from './rpc-actor.js';
import { checkFlags } from './args.js';
import { percentile, round, writeResults } from './stats.js';
import { printTable } from './table.js';

export const USAGE = `Usage: npm run bench -- rpc

Latency of one request/reply to a rank worker: raw postMessage, raw Comlink and an Ascent
actor call, on the same worker, interleaved in rounds. No flags (-h, --help: this help).
Results: bench/results/rpc-<date>.json (and rpc-latest.json).
`;

type Mechanism = 'postMessage' | 'comlink' | 'actor';

const PAYLOADS: Record<string, () => unknown> = {
  none: () => 0,
  '64B': () => 'x'.repeat(64),
  '4KiB': () => ({ ids: Array.from({ length: 512 }, (_, i) => i), tag: 'batch' }),
  '256KiB': () => new Float32Array(65536),
};

export interface RpcRow {
  mechanism: Mechanism;
  payload: string;
  p50Us: number;
  p99Us: number;
  callsPerSec: number;
}

export async function runRpcBench(
  opts: { rounds?: number; callsPerRound?: number } = {},
): Promise<{ suite: string; date: string; rows: RpcRow[]; ratios: Record<string, number> }> {
  const rounds = opts.rounds ?? 20;
  const perRound = opts.callsPerRound ?? 250;
  const world = await World.create({ size: 1, deviceMemory: '64MiB', taskPool: false });
  try {
    const actors = await world.spawn<RpcBench>({ module: new URL('./rpc-actor.js', import.meta.url), export: 'RpcBench' });
    const actor = actors.ref(0);
    const raw = new MessageChannel();
    const cl = new MessageChannel();
    await actor.methods.serveRaw(Comlink.transfer(raw.port2, [raw.port2 as unknown as Transferable]) as never);
    await actor.methods.serveComlink(Comlink.transfer(cl.port2, [cl.port2 as unknown as Transferable]) as never);
    const comlink = Comlink.wrap<{ echo(x: unknown): unknown }>(cl.port1 as unknown as Comlink.Endpoint);

    let rawResolve: ((v: unknown) => void) | undefined;
    raw.port1.on('message', (m) => rawResolve!(m));
    const viaPostMessage = (x: unknown) =>
      new Promise<unknown>((resolve) => {
        rawResolve = resolve;
        raw.port1.postMessage(x);
      });
    const calls: Record<Mechanism, (x: unknown) => Promise<unknown>> = {
      postMessage: viaPostMessage,
      comlink: (x) => comlink.echo(x) as Promise<unknown>,
      actor: (x) => actor.methods.echo(x),
    };

    const rows: RpcRow[] = [];
    for (const [payloadName, make] of Object.entries(PAYLOADS)) {
      const payload = make();
      const samples: Record<Mechanism, number[]> = { postMessage: [], comlink: [], actor: [] };
      const busy: Record<Mechanism, number> = { postMessage: 0, comlink: 0, actor: 0 };
      for (const m of Object.keys(calls) as Mechanism[]) for (let i = 0; i < 200; i++) await calls[m](payload); // warm-up
      for (let r = 0; r < rounds; r++) {
        for (const m of Object.keys(calls) as Mechanism[]) {
          const t0 = process.hrtime.bigint();
          for (let i = 0; i < perRound; i++) {
            const s = process.hrtime.bigint();
            await calls[m](payload);
            samples[m].push(Number(process.hrtime.bigint() - s) / 1000);
          }
          busy[m] += Number(process.hrtime.bigint() - t0) / 1e9;
        }
      }
      for (const m of Object.keys(calls) as Mechanism[]) {
        const sorted = samples[m].sort((a, b) => a - b);
        rows.push({
          mechanism: m,
          payload: payloadName,
          p50Us: round(percentile(sorted, 50)),
          p99Us: round(percentile(sorted, 99)),
          callsPerSec: Math.round(sorted.length / busy[m]),
        });
      }
    }
    comlink[Comlink.releaseProxy]();
    raw.port1.close();
    const ratios: Record<string, number> = {};
    for (const payload of Object.keys(PAYLOADS)) {
      const p50 = (m: Mechanism) => rows.find((x) => x.mechanism === m && x.payload === payload)!.p50Us;
      ratios[`actor/comlink p50 ${payload}`] = round(p50('actor') / p50('comlink'), 3);
      ratios[`comlink/postMessage p50 ${payload}`] = round(p50('comlink') / p50('postMessage'), 3);
    }
    return { suite: 'rpc', date: new Date().toISOString(), rows, ratios };
  } finally {
    await world.shutdown();
  }
}

export async function main(argv: string[]): Promise<void> {
  checkFlags('rpc', argv);
  const result = await runRpcBench();
  printTable(result.rows);
  printTable(Object.entries(result.ratios).map(([ratio, value]) => ({ ratio, value })));
  console.log(`wrote ${writeResults('rpc', result)}`);
}
