/**
 * A stream's settle point without a host round trip when there is nothing to wait for.
 * `stream.synchronize()` enqueues a marker and waits for the stream thread to run it and
 * for the completion to reach this thread: two thread wake-ups, which on a machine whose
 * cores are shared by every rank's threads cost from 0.1 ms to tens of ms each. A sync
 * does this at its start (the default stream's last work must be done before the sync's
 * stream reads the weights) and at its end, where the stream has usually run everything
 * already. The stream's counters say so exactly (an op counts as completed after it ran),
 * so the wait is only taken when work is outstanding or the stream holds an error (which
 * the synchronize then reports, as before).
 */
import type { Stream } from '../runtime/device/device-index.js';

export async function settle(stream: Stream, timeoutMs: number): Promise<void> {
  const s = stream.stats();
  if (s.enqueued === s.completed && !s.error) return;
  await stream.synchronize({ timeoutMs });
}
