/**
 * Time this rank spent in collectives during a window, from the communicators'
 * flight recorders: the union of [started, ended] intervals of ops that overlap the
 * window (waiting for peers included, as a profiler would show it).
 */
import type { Communicator } from '../runtime/comm/comm.js';

export function commMillis(comms: readonly Communicator[], fromMs: number, toMs: number): number {
  const spans: Array<[number, number]> = [];
  for (const c of comms) {
    const me = c.flightRecord().ranks.find((r) => r.rank === c.rank);
    for (const e of me?.entries ?? []) {
      if (e.startedAtMs === null || e.endedAtMs === null) continue;
      const a = Math.max(e.startedAtMs, fromMs),
        b = Math.min(e.endedAtMs, toMs);
      if (b > a) spans.push([a, b]);
    }
  }
  spans.sort((x, y) => x[0] - y[0]);
  let total = 0,
    end = -Infinity;
  for (const [a, b] of spans) {
    if (b <= end) continue;
    total += b - Math.max(a, end);
    end = b;
  }
  return total;
}
