// examples/world.mjs — the actor API from a plain Node.js script (no launch).
// Run: node examples/world.mjs
import { World } from 'ascent';

const world = await World.create({ size: 4 }); // 4 rank workers, one device each
try {
  const counters = await world.spawn({ module: new URL('./counter.ts', import.meta.url), export: 'Counter', args: [10] });

  console.log('add on every rank:', await counters.call('add', 5)); // per-rank results in rank order
  console.log('add on rank 2:', await counters.callOne(2, 'add', 1)); // one rank
  counters.broadcast('reset'); // every rank, no reply (failures go to world.onBroadcastError)

  const ref = counters.ref(0).with({ timeoutMs: 1000, signal: AbortSignal.timeout(5000) });
  console.log('typed call on rank 0:', await ref.methods.add(1), 'on', await ref.methods.where());

  const sample = { completion: '4321', target: '4312' };
  console.log('reward:', await world.tasks.run({ module: new URL('./rewards.mjs', import.meta.url), export: 'score' }, sample));
} finally {
  await world.shutdown(); // every thread gone; the process can exit
}
