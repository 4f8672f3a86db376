/**
 * The fingerprint kernel (src/sync/fingerprint.ts, native/kernels/fingerprint.cc): the
 * sum over any split of a tensor into regions — row blocks, a transposed copy read with
 * swapped strides, TP-style slices selected by the period filter, padded chunks cut by
 * `limit` — equals the whole tensor's; one changed element (even by one ulp) and two
 * swapped elements change it.
 */
import { describe, expect, it } from 'vitest';
import { Device } from '../src/runtime/device/device.js';
import { Tensor, permute } from '../src/runtime/device/device-index.js';
import { enqueueFingerprint, flatView, type AffineView, type RegionFilter } from '../src/sync/fingerprint.js';

const device = Device.get(0);
const stream = device.defaultStream;
const R = 6,
  C = 10;
const data = Float32Array.from({ length: R * C }, (_, i) => Math.sin(i * 1.7) * 3);

async function fp(parts: Array<{ t: Tensor; view: AffineView; filter?: RegionFilter; limit?: number }>): Promise<bigint> {
  const out = Tensor.zeros(device, [1], 'int64', { stream });
  try {
    for (const p of parts)
      enqueueFingerprint(p.t, p.view, out, 0, stream, { ...(p.filter ? { filter: p.filter } : {}), ...(p.limit !== undefined ? { limit: p.limit } : {}) });
    return ((await out.toArray({ stream, timeoutMs: 30_000 })) as BigInt64Array)[0]!;
  } finally {
    out.release();
  }
}

describe('tensor fingerprints', () => {
  it('are partition-additive: row blocks, a transposed layout, period-filtered slices and padded chunks all sum to the whole', async () => {
    const x = Tensor.fromArray(device, data, [R, C], { stream });
    const whole = await fp([{ t: x, view: flatView(R * C) }]);
    expect(whole).not.toBe(0n);
    // Rows [0, 2) and [2, 6) read separately.
    expect(
      await fp([
        { t: x, view: flatView(2 * C) },
        { t: x, view: flatView(4 * C, 2 * C, 2 * C) },
      ]),
    ).toBe(whole);
    // The transposed copy [C, R], read with global strides [1, C].
    const xt = permute(x, [1, 0], { stream });
    expect(await fp([{ t: xt, view: { shape: [C, R], local: [R, 1], localOffset: 0, global: [1, C], globalOffset: 0 } }])).toBe(whole);
    // Column slices [0, 4) and [4, 10) of every row (a row-parallel TP split), by the period filter.
    const cols = (start: number, len: number) => ({ t: x, view: flatView(R * C), filter: { period: C, start, len } });
    expect(await fp([cols(0, 4), cols(4, 6)])).toBe(whole);
    expect(await fp([cols(0, 4)])).not.toBe(whole);
    // The same slices read from the transposed layout (canonical stride C along the inner loop).
    const tview: AffineView = { shape: [C, R], local: [R, 1], localOffset: 0, global: [1, C], globalOffset: 0 };
    expect(
      await fp([
        { t: xt, view: tview, filter: { period: C, start: 0, len: 4 } },
        { t: xt, view: tview, filter: { period: C, start: 4, len: 6 } },
      ]),
    ).toBe(whole);
    // fsdp2-style padded chunks of 4 rows: the second chunk's padding is cut by limit.
    const padded = Tensor.fromArray(device, Float32Array.from([...data, ...new Float32Array(2 * C).fill(7)]), [8 * C], { stream });
    expect(
      await fp([
        { t: padded, view: flatView(4 * C, 0, 0), limit: R * C },
        { t: padded, view: flatView(4 * C, 4 * C, 4 * C), limit: R * C },
      ]),
    ).toBe(whole);
    for (const t of [x, xt, padded]) t.release();
  });

  it('change when one element changes by one ulp or two elements swap', async () => {
    const base = await fp([{ t: Tensor.fromArray(device, data, [R * C], { stream }), view: flatView(R * C) }]);
    const ulp = data.slice();
    const u = new Uint32Array(ulp.buffer);
    u[17] = u[17]! + 1;
    const swapped = data.slice();
    [swapped[3], swapped[41]] = [swapped[41]!, swapped[3]!];
    const scaled = data.map((v) => Math.fround(v * 1.001));
    for (const changed of [ulp, swapped, scaled]) {
      const t = Tensor.fromArray(device, changed, [R * C], { stream });
      expect(await fp([{ t, view: flatView(R * C) }])).not.toBe(base);
      t.release();
    }
  });

  it('refuse a view outside the source with a clear error', () => {
    const t = Tensor.zeros(device, [8], 'fp32', { stream });
    const out = Tensor.zeros(device, [1], 'int64', { stream });
    expect(() => enqueueFingerprint(t, flatView(9), out, 0, stream)).toThrow(/reaches element 8 of .* which has 8/);
    expect(() => enqueueFingerprint(t, flatView(8), out, 1, stream)).toThrow(/slot 1 is not an element/);
    t.release();
    out.release();
  });
});
