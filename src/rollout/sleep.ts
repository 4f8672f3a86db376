/**
 * Sleep and wake of the rollout engine's weights (the KV cache does its own in kv-cache.ts),
 * like vLLM's sleep mode: level 1 copies every parameter to the host and frees its device
 * memory ('offloaded'; wake restores bytes and state), level 2 frees it without a copy
 * ('dropped'; wake allocates fresh memory and the parameters stay 'dropped' until weights
 * are written again, so a generate() in between is a WeightLayoutError, never garbage).
 */
import { Tensor, type Stream } from '../runtime/device/device-index.js';
import { copy } from '../runtime/device/ops.js';
import type { RuntimeParams } from './runtime-params.js';

export type SleepLevel = 1 | 2;

export async function sleepParams(params: RuntimeParams, level: SleepLevel, stream: Stream, timeoutMs?: number): Promise<void> {
  for (const p of params.params.values()) {
    p.stateBeforeSleep = p.state;
    if (level === 1 && p.tensor && p.state !== 'dropped') {
      p.host = await p.tensor.toBytes({ stream, timeoutMs });
      p.state = 'offloaded';
    } else {
      p.host = null;
      p.state = 'dropped';
      p.filled.clear();
    }
    p.tensor?.release();
    p.tensor = null;
  }
}

export function wakeParams(params: RuntimeParams, stream: Stream): void {
  for (const p of params.params.values()) {
    const t = params.ensureAllocated(p);
    if (p.state === 'offloaded') {
      const tmp = Tensor.fromArray(params.device, p.host!, [p.host!.length], { dtype: 'uint8', stream });
      copy(new Tensor(t.device, t.buffer, 'uint8', [t.nbytes], undefined, t.byteOffset), tmp, { stream });
      tmp.release();
      p.state = p.stateBeforeSleep!;
      p.host = null;
    }
    p.stateBeforeSleep = null;
  }
}
