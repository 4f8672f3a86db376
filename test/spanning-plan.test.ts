// The host-side planning of collectives across processes (no MPI needed): allToAll's
// block order, allToAllV's count check and which split colors span processes.
import { describe, expect, it } from 'vitest';
import { checkAllToAllVCounts, packAllToAll, planSplit, unpackAllToAll } from '../src/runtime/comm/spanning-plan.js';
import { CollectiveMismatchError, InvalidArgumentError } from '../src/runtime/errors.js';

describe('allToAll across processes: block order', () => {
  it('pack on every process, exchange blocks, unpack = chunk q of rank r lands at chunk r of rank q', () => {
    const n = 3; // ranks per process
    const P = 2;
    const size = n * P;
    const c = 2; // bytes per chunk
    // Byte j of the chunk rank `src` sends to rank `dst`: a value naming all three.
    const byte = (src: number, dst: number, j: number) => src * 40 + dst * 4 + j;
    const gathered = (p: number) =>
      Uint8Array.from({ length: n * size * c }, (_, i) => byte(p * n + Math.floor(i / (size * c)), Math.floor(i / c) % size, i % c));
    const packed = [0, 1].map((p) => packAllToAll(gathered(p), n, P, c));
    // MPI_Alltoall: process p's block q goes to process q as its block p.
    const block = n * n * c;
    const received = [0, 1].map((q) => {
      const r = new Uint8Array(P * block);
      for (let p = 0; p < P; p++) r.set(packed[p]!.subarray(q * block, (q + 1) * block), p * block);
      return r;
    });
    for (let q = 0; q < P; q++) {
      const out = unpackAllToAll(received[q]!, n, P, c);
      for (let b = 0; b < n; b++) {
        const want = Array.from({ length: size * c }, (_, i) => byte(Math.floor(i / c), q * n + b, i % c));
        expect(Array.from(out.subarray(b * size * c, (b + 1) * size * c))).toEqual(want);
      }
    }
  });
});

describe('allToAllV across processes: counts', () => {
  const rows = (send: number[][], recv: number[][]) =>
    BigInt64Array.from(
      send.flatMap((s, r) => [...s, ...recv[r]!]),
      (v) => BigInt(v),
    );

  it('consistent counts give the largest one', () => {
    expect(
      checkAllToAllVCounts(
        rows(
          [
            [1, 2],
            [3, 0],
          ],
          [
            [1, 3],
            [2, 0],
          ],
        ),
        2,
      ),
    ).toBe(3);
  });

  it('a pair that disagrees is a CollectiveMismatchError naming both ranks', () => {
    const run = () =>
      checkAllToAllVCounts(
        rows(
          [
            [1, 2],
            [3, 0],
          ],
          [
            [1, 3],
            [5, 0],
          ],
        ),
        2,
      );
    expect(run).toThrow(CollectiveMismatchError);
    expect(run).toThrow(/rank 0 sends 2 elements to rank 1, which expects 5.*HINT: rank q's sendCounts\[r\] must equal rank r's recvCounts\[q\]/);
    try {
      run();
    } catch (err) {
      expect((err as CollectiveMismatchError).details.culpritWorldRanks).toEqual([0, 1]);
    }
  });
});

describe('split across processes: plan', () => {
  const pairs = (cs: Array<[number, number]>) => BigInt64Array.from(cs.flat(), (v) => BigInt(v));

  it('groups by color in key order and says which colors span processes', () => {
    // 2 processes x 2 ranks; color = local rank (spans), rank 3 opts out of nothing.
    const plan = planSplit(
      pairs([
        [0, 0],
        [1, 1],
        [0, 2],
        [1, 3],
      ]),
      2,
    );
    expect([...plan.groups.entries()]).toEqual([
      [0, [0, 2]],
      [1, [1, 3]],
    ]);
    expect(plan.spanning).toEqual([0, 1]);
    // color = process, -1 opts out: nothing spans.
    const local = planSplit(
      pairs([
        [0, 0],
        [0, 1],
        [1, 2],
        [-1, 3],
      ]),
      2,
    );
    expect(local.spanning).toEqual([]);
    expect([...local.groups.entries()]).toEqual([
      [0, [0, 1]],
      [1, [2]],
    ]);
  });

  it('a spanning color with unequal ranks per process is ragged: its blocks per process are counted', () => {
    const plan = planSplit(
      pairs([
        [0, 0],
        [1, 1],
        [0, 2],
        [0, 3],
      ]),
      2,
    );
    expect([...plan.groups.entries()]).toEqual([
      [0, [0, 2, 3]],
      [1, [1]],
    ]);
    expect(plan.spanning).toEqual([0]);
    expect([...plan.counts.entries()]).toEqual([[0, [1, 2]]]);
  });

  it('a spanning color whose keys put its ranks out of process order is refused with a HINT', () => {
    // keys put rank 2 (process 1) before rank 0 (process 0)
    expect(() =>
      planSplit(
        pairs([
          [0, 5],
          [1, 1],
          [0, 2],
          [1, 3],
        ]),
        2,
      ),
    ).toThrow(InvalidArgumentError);
    expect(() =>
      planSplit(
        pairs([
          [0, 5],
          [1, 1],
          [0, 2],
          [1, 3],
        ]),
        2,
      ),
    ).toThrow(/color 0 has members \[2, 0\].*HINT:/);
    // process 0, then 1, then 0 again: three blocks over two processes
    expect(() =>
      planSplit(
        pairs([
          [0, 0],
          [0, 5],
          [0, 2],
          [-1, 3],
        ]),
        2,
      ),
    ).toThrow(/color 0 has members \[0, 2, 1\]/);
  });
});
