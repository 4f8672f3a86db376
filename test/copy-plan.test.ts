// CopyPlan (src/runtime/device/copy-plan.ts): a copyRanges list built once and enqueued many
// times, each time between other tensors of the same roles. Held to what the same add() calls
// against the bound tensors give (bitwise, one op), and to its checks.
import { describe, expect, it } from 'vitest';
import { Device, Tensor } from '../src/runtime/device/device-index.js';
import { CopyRanges } from '../src/runtime/device/copy-ranges.js';
import { CopyPlan } from '../src/runtime/device/copy-plan.js';
import { viewOf } from '../src/runtime/device/views.js';
import { expectRefused } from './helpers/refused.js';
import { InvalidStateError } from '../src/runtime/errors.js';

const d = Device.get(0);

function ints(n: number, seed: number): Int32Array {
  let x = seed >>> 0;
  return Int32Array.from({ length: n }, () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return x | 0;
  });
}

/** dp-strided ranges as FSDP2's unpack makes them: dst role 0, src role 1, through views. */
function fill(list: CopyRanges, dst: Tensor, src: Tensor): void {
  const a = viewOf(dst, [600], 10),
    b = viewOf(src, [700], 3);
  for (let r = 0; r < 4; r++) for (let p = 0; p < 5; p++) list.add(a, r * 120 + p * 24, b, p * 130 + r * 31, 17 + p);
  list.add(dst, 0, src, 999, 1);
}

describe('CopyPlan', () => {
  it('bound to other tensors equals the list built against them, as one op, every time', async () => {
    const s = d.newStream();
    const o = { stream: s };
    const tDst = Tensor.zeros(d, [1000], 'int32', o),
      tSrc = Tensor.zeros(d, [1000], 'int32', o);
    const list = new CopyRanges();
    fill(list, tDst, tSrc);
    const plan = CopyPlan.from(list, [tDst, tSrc]);
    expect(list.length).toBe(0);
    expect(plan.length).toBe(21);
    for (let round = 0; round < 3; round++) {
      const src = Tensor.fromArray(d, ints(1000, round + 1), [1000], o);
      const init = ints(1000, round + 50);
      const [viaPlan, viaList] = [Tensor.fromArray(d, init, [1000], o), Tensor.fromArray(d, init, [1000], o)];
      const before = s.stats().enqueued;
      plan.enqueue(s, [viaPlan, src]);
      expect(s.stats().enqueued - before).toBe(1);
      const l = new CopyRanges();
      fill(l, viaList, src);
      l.enqueue(s);
      const got = await viaPlan.toArray({ stream: s });
      expect(got).toEqual(await viaList.toArray({ stream: s }));
      expect(got).not.toEqual(init);
      for (const t of [src, viaPlan, viaList]) t.release();
    }
    // Tensors that start inside their buffers: offsets move with them.
    const bigSrc = Tensor.fromArray(d, ints(1200, 9), [1200], o),
      bigA = Tensor.zeros(d, [1100], 'int32', o),
      bigB = Tensor.zeros(d, [1100], 'int32', o);
    const [src, a, b] = [viewOf(bigSrc, [1000], 200), viewOf(bigA, [1000], 100), viewOf(bigB, [1000], 100)];
    plan.enqueue(s, [a, src]);
    const l = new CopyRanges();
    fill(l, b, src);
    l.enqueue(s);
    expect(await bigA.toArray({ stream: s })).toEqual(await bigB.toArray({ stream: s }));
    for (const t of [tDst, tSrc, bigSrc, bigA, bigB]) t.release();
    s.destroy();
  });

  it('rejects bad roles and bindings, enqueuing nothing', async () => {
    const s = d.newStream();
    const o = { stream: s };
    const [x, y, z] = [0, 1, 2].map(() => Tensor.zeros(d, [1000], 'int32', o));
    const small = Tensor.zeros(d, [500], 'int32', o);
    const other = Tensor.zeros(Device.get(1), [1000], 'int32');
    const build = (roles: Tensor[]) => {
      const list = new CopyRanges();
      fill(list, x!, y!);
      return CopyPlan.from(list, roles);
    };
    expectRefused(() => build([x!]), /touches buffer \d+, which is not the buffer of any role/);
    expectRefused(() => build([x!, x!]), /roles 0 and 1 share a buffer/);
    expectRefused(() => build([viewOf(x!, [100]), y!]), /range 3: bytes \[328, 408\) relative to role 0 lie outside its 400 bytes/);
    const plan = build([x!, y!]);
    const before = s.stats().enqueued;
    expectRefused(() => plan.enqueue(s, [x!]), /the plan has 2 roles but 1 tensors were given/);
    expectRefused(() => plan.enqueue(s, [z!, small!]), /tensor 1 has 2000 bytes but the plan's ranges need 4000 of role 1/);
    expectRefused(() => plan.enqueue(s, [z!, z!]), /tensor 1 shares its buffer with an earlier one/);
    expectRefused(() => plan.enqueue(s, [z!, other]), /tensor 1 is on device 1/);
    expectRefused(() => plan.enqueue(s, [z!, 3 as never]), /tensor 1 must be a Tensor/);
    expectRefused(() => plan.enqueue(Device.get(1).defaultStream, [z!, y!]), /ranges are on device 0 but the stream belongs to device 1/);
    expect(s.stats().enqueued).toBe(before);
    for (const t of [x, y, z, small, other]) t!.release();
    expect(() => plan.enqueue(s, [x!, y!])).toThrow(InvalidStateError);
    expect(() => plan.enqueue(s, [x!, y!])).toThrow(/tensor 0.*released/);
    s.destroy();
  });
});
