/**
 * Agreement on a failure: every rank learns whether any rank of `comm` raised a flag
 * (one int32 all-reduce max), so an error found on one rank (a bad input, a failed
 * write) makes every rank throw instead of leaving the others waiting in the next
 * collective.
 */
import type { Communicator } from '../runtime/comm/comm.js';
import { Tensor } from '../runtime/device/device-index.js';

export async function anyRank(comm: Communicator, flag: boolean): Promise<boolean> {
  if (comm.size === 1) return flag;
  const stream = comm.device.defaultStream;
  const t = Tensor.fromArray(comm.device, Int32Array.from([flag ? 1 : 0]), [1], { stream });
  try {
    await comm.allReduce(t, t, 'max', stream);
    return ((await t.toArray({ stream })) as Int32Array)[0] === 1;
  } finally {
    t.release();
  }
}
