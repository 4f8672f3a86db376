/**
 * Every collective x dtype x reduce op x {1,2,3,4,8,16} ranks x sizes (0, odd, and
 * large enough for the two-phase all-reduce), in place and out of place, compared
 * exactly with the JS reference (src/runtime/comm/comm-reference.ts): #wrong must be 0,
 * nccl-tests style. Each rank count runs all its cases inside one long-lived set of
 * worker ranks (real threads, real native collectives).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, runRanks } from './helpers/comm-ranks.js';

const DTYPES = ['fp32', 'bf16', 'fp16', 'int32', 'int64'] as const;
const REDS = ['sum', 'prod', 'max', 'min', 'avg'] as const;
const SIZES = [0, 1, 7, 1031];
// Above the 64 KiB staging threshold for every dtype: exercises the two-phase path.
const LARGE = 40_000;

interface Case {
  op: string;
  dtype: string;
  count: number;
  /** 'even' (allReduce): even ranks in place, odd ranks out of place. */
  inPlace: boolean | 'even';
  red?: string;
  root?: number;
}

function cases(P: number): Case[] {
  const out: Case[] = [];
  for (const dtype of DTYPES) {
    for (const inPlace of [false, true]) {
      // 16 threads on 2 cores: keep the sizes that matter (0, odd, multi-block) so
      // the whole file stays well under a minute.
      const sizes = P >= 16 ? (inPlace ? [7] : [0, 1031]) : SIZES;
      for (const count of sizes) {
        for (const red of REDS) {
          out.push({ op: 'allReduce', dtype, count, inPlace, red });
          out.push({ op: 'reduceScatter', dtype, count, inPlace, red });
        }
        out.push({ op: 'broadcast', dtype, count, inPlace, root: count + 1 });
        out.push({ op: 'allGather', dtype, count, inPlace });
        out.push({ op: 'allToAll', dtype, count, inPlace });
      }
      out.push({ op: 'allToAllV', dtype, count: inPlace ? 1 : 2, inPlace: false });
      out.push({ op: 'sendrecv', dtype, count: inPlace ? 7 : 1031, inPlace: false });
    }
  }
  // The large path: fewer combinations (the JS reference is the slow part).
  const large: Array<[string, string]> =
    P >= 8
      ? [
          ['fp32', 'sum'],
          ['bf16', 'avg'],
        ]
      : [
          ['fp32', 'sum'],
          ['bf16', 'avg'],
          ['fp16', 'max'],
          ['int64', 'prod'],
          ['int32', 'min'],
        ];
  for (const [dtype, red] of large) {
    out.push({ op: 'allReduce', dtype, count: LARGE + 3, inPlace: false, red });
    out.push({ op: 'allReduce', dtype, count: LARGE, inPlace: true, red });
  }
  out.push({ op: 'reduceScatter', dtype: 'fp32', count: Math.ceil(LARGE / P), inPlace: true, red: 'sum' });
  // Large reduce-scatter (native/comm/reduce.cc works in whole cache lines plus a
  // ragged end): every dtype and reduce op on few ranks, two on many; odd counts so the
  // movers' parts cut outputs at unaligned offsets.
  const largeRs: Array<[string, string, boolean]> =
    P >= 8
      ? [
          ['bf16', 'avg', false],
          ['int64', 'prod', true],
        ]
      : [
          ['fp32', 'avg', false],
          ['bf16', 'max', true],
          ['fp16', 'sum', false],
          ['int32', 'prod', false],
          ['int64', 'min', true],
        ];
  for (const [dtype, red, inPlace] of largeRs) {
    out.push({ op: 'reduceScatter', dtype, count: Math.ceil(LARGE / P) + (inPlace ? 1 : 3), inPlace, red });
  }
  // Above the 1 MiB streaming-store threshold (copy.h): odd and aligned counts, in place
  // and not (few ranks: every rank builds its whole input of 2^18 elements and, for the reference,
  // its chunk of every other rank's).
  const big = Math.ceil((1 << 18) / P);
  if (P === 2) {
    out.push({ op: 'reduceScatter', dtype: 'fp32', count: big + 5, inPlace: false, red: 'sum' });
    out.push({ op: 'reduceScatter', dtype: 'fp32', count: big + 16, inPlace: true, red: 'max' });
  }
  if (P === 3) out.push({ op: 'reduceScatter', dtype: 'bf16', count: 2 * big + 1, inPlace: false, red: 'avg' });
  // allReduce with streaming stores and several 32 KiB blocks in each mover's chunk
  // (native/comm/reduce.cc): out of place, in place, and both in one collective (streaming
  // stores into the outputs that are not an input, plain stores into those that are).
  // Odd counts: the last chunk ends in a ragged line.
  if (P === 2) {
    for (const inPlace of [false, true, 'even'] as const) {
      out.push({ op: 'allReduce', dtype: 'fp32', count: 3 * (1 << 17) + 5, inPlace, red: 'sum' });
    }
  }
  if (P === 3) out.push({ op: 'allReduce', dtype: 'bf16', count: (1 << 19) + 3, inPlace: 'even', red: 'avg' });
  out.push({ op: 'allGather', dtype: 'fp32', count: Math.ceil(LARGE / P) + 1, inPlace: false });
  // Large copies, in place: movers write into every rank's output (native/comm/collectives.cc).
  out.push({ op: 'allGather', dtype: 'fp32', count: Math.ceil(LARGE / P) + 1, inPlace: true });
  out.push({ op: 'broadcast', dtype: 'bf16', count: LARGE + 5, inPlace: true, root: P - 1 });
  out.push({ op: 'allToAll', dtype: 'fp32', count: Math.ceil(LARGE / P) + 3, inPlace: true });
  return out;
}

beforeAll(() => ensureBuilt(), 120_000);

const traceDir = mkdtempSync(join(tmpdir(), 'ascent-coll-'));
afterAll(() => rmSync(traceDir, { recursive: true, force: true }));

describe('collectives vs the JS reference', () => {
  for (const P of [1, 2, 3, 4, 8, 16]) {
    it(`${P} rank(s): every op, dtype, reduce op and size; split`, async () => {
      const list = cases(P);
      // Typically ~20 s for 16 ranks on 2 cores; the limits leave room for a loaded machine.
      const results = await runRanks(P, { mode: 'suite', cases: list, traceDir }, 100_000);
      for (const r of results) {
        expect(r.error, `rank ${r.rank} failed`).toBeUndefined();
        expect(r.exited, `rank ${r.rank} exited early`).toBeUndefined();
        expect(r.results, `rank ${r.rank}: wrong results`).toEqual([]);
      }
      // split(color = rank % 2, key = -rank), rank 0 opting out (color -1) when P > 2.
      for (const r of results) {
        const split = r.split as { none?: boolean; rank?: number; size?: number; sum?: number; error?: unknown };
        expect(split.error).toBeUndefined();
        const color = P > 2 && r.rank === 0 ? -1 : r.rank % 2;
        if (color < 0) {
          expect(split.none).toBe(true);
          continue;
        }
        const members = Array.from({ length: P }, (_, q) => q).filter((q) => !(P > 2 && q === 0) && q % 2 === color);
        const byKey = [...members].sort((a, b) => b - a); // key = -rank
        expect(split.size).toBe(members.length);
        expect(split.rank).toBe(byKey.indexOf(r.rank));
        expect(split.sum).toBe(members.reduce((a, q) => a + q + 1, 0));
      }
    }, 110_000);
  }
});
