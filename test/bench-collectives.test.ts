import { describe, expect, it } from 'vitest';
// The bench spawns its actor module from dist/, as `npm run bench` does.
import { busFactor, checkTarget, runCollectivesBench, TARGETS, trafficBytes } from '../dist/bench/collectives.js';
import { spanSkipReason } from '../dist/bench/collectives-mpi.js';
import { loadNative } from '../dist/src/internal.js';

const spanSkip = spanSkipReason();
if (spanSkip) console.warn(`[bench-collectives] skipping the 2-process rows: ${spanSkip}`);

describe('collectives benchmark harness', () => {
  it('produces nccl-tests rows (out of place and in place) with #wrong = 0 and consistent bandwidth columns', async () => {
    const printed: string[] = [];
    const r = await runCollectivesBench(['--ranks', '3', '--min-bytes', '1024', '--max-bytes', '65536', '--step', '64', '--processes', '0'], (l) =>
      printed.push(l),
    );
    expect(r.baselines.streamCopyGBs).toBeGreaterThan(0);
    expect(new Set(r.rows.map((x) => x.op))).toEqual(new Set(['allReduce', 'allGather', 'reduceScatter', 'broadcast', 'allToAll']));
    expect(r.rows).toHaveLength(5 * 2 * 2); // 5 ops x 2 sizes x (out of place, in place)
    for (const row of r.rows) {
      expect(row.wrong, `${row.op} ${row.bytes} inPlace=${row.inPlace}`).toBe(0);
      expect(row.timeUs).toBeGreaterThan(0);
      expect(row.busbwGBs).toBeCloseTo(row.algbwGBs * busFactor(row.op, 3), 2);
      expect(row.efficiency).toBeCloseTo(trafficBytes(row.op, row.bytes, 3) / (row.timeUs * 1e3) / r.baselines.streamCopyGBs, 2);
      expect(row.cpuUsPerOp, `${row.op} ${row.bytes}`).toBeGreaterThan(0);
      // 3 ranks x <= 64 KiB moves far less than the rows that get a copy beside them.
      expect(row.efficiencyNear).toBeUndefined();
      // The targets name 16-rank rows only.
      expect(row.target).toBeUndefined();
    }

    // Read the output as a tool reading nccl-tests output does: data rows are the lines not
    // starting with '#', 13 fields each; the footer gives the errors and the mean busbw.
    const data = printed.filter((l) => !l.startsWith('#'));
    expect(data).toHaveLength(5 * 2);
    const fields = data.map((l) => l.trim().split(/\s+/));
    for (const f of fields) expect(f).toHaveLength(13);
    const [ar, ag, rs, bc, a2a] = [0, 2, 4, 6, 8].map((i) => fields[i]!);
    expect(ar!.slice(2, 5)).toEqual(['float', 'sum', '-1']);
    expect(ag!.slice(2, 5)).toEqual(['float', 'none', '-1']);
    expect(rs!.slice(2, 5)).toEqual(['float', 'sum', '-1']);
    expect(bc!.slice(2, 5)).toEqual(['float', 'none', '0']);
    expect(a2a!.slice(2, 5)).toEqual(['float', 'none', '-1']);
    fields.forEach((f, i) => {
      const out = r.rows[2 * i]!,
        inp = r.rows[2 * i + 1]!;
      expect([Number(f[0]), Number(f[1])]).toEqual([out.bytes, out.count]);
      // Printed with 2 decimals (%6.2f).
      expect(Math.abs(Number(f[7]) - out.busbwGBs)).toBeLessThanOrEqual(0.0051);
      expect(Math.abs(Number(f[11]) - inp.busbwGBs)).toBeLessThanOrEqual(0.0051);
      expect([f[8], f[12]]).toEqual(['0', '0']);
    });
    expect(printed.filter((l) => l === '# Out of bounds values : 0 OK')).toHaveLength(5);
    const avg = printed.filter((l) => l.startsWith('# Avg bus bandwidth    : ')).map((l) => Number(l.split(':')[1]));
    expect(avg).toHaveLength(5);
    const arRows = r.rows.filter((x) => x.op === 'allReduce');
    expect(avg[0]).toBeCloseTo(arRows.reduce((a, x) => a + x.busbwGBs, 0) / arRows.length, 3);
    expect(printed.filter((l) => /^# {2}Rank {2}\d Group {2}0 Pid +\d+ on +\S+ device {2}\d \[0x00\] /.test(l))).toHaveLength(5 * 3);

    // The native floor of the allReduce sizes (every rank's sum is checked natively: a wrong one throws).
    expect(r.floorRows.map((x) => x.bytes)).toEqual([1024, 65536]);
    for (const f of r.floorRows) {
      expect(f.iters).toBe(2000);
      expect(f.p10Us).toBeGreaterThan(0);
      expect(f.p10Us).toBeLessThanOrEqual(f.timeUs);
      expect(f.timeUs).toBeLessThanOrEqual(f.p90Us);
      expect(f.cpuUsPerOp).toBeGreaterThan(0);
      expect(f.sleepsPerOp).toBeGreaterThanOrEqual(0);
      expect(printed).toContain(
        `# native floor, allReduce ${f.bytes} B on 3 threads (no JS, no stream threads): p50 ${f.timeUs} us (p10 ${f.p10Us}, p90 ${f.p90Us}), cpu ${f.cpuUsPerOp} us/op, ${f.sleepsPerOp} sleeps/op`,
      );
    }
  }, 180_000);

  it('refuses a native floor it cannot measure, saying what it expects', () => {
    expect(() => loadNative().commFloorBench(3, 6, 10)).toThrow(/commFloorBench expects nranks <= 1024, bytes a multiple of 4 up to 65536/);
    expect(() => loadNative().commFloorBench(3, 4096, 1)).toThrow(/2 <= iters <= 1000000/);
  });

  it.skipIf(spanSkip !== null)(
    "runs allReduce on 2 processes under mpirun beside Open MPI's MPI_Allreduce, both exact",
    async () => {
      const printed: string[] = [];
      const r = await runCollectivesBench(
        ['--ranks', '4', '--op', 'allReduce', '--min-bytes', '4096', '--max-bytes', '65536', '--step', '16', '--processes', '2'],
        (l) => printed.push(l),
      );
      expect(r.processRows.map((x) => x.bytes)).toEqual([4096, 65536]);
      for (const row of r.processRows) {
        expect(row).toMatchObject({ op: 'allReduce', processes: 2, ranks: 4, wrong: 0, mpiWrong: 0 });
        expect(row.timeUs).toBeGreaterThan(0);
        expect(row.mpiTimeUs).toBeGreaterThan(0);
        expect(row.vsMpi).toBeCloseTo(row.timeUs / row.mpiTimeUs, 1);
        expect(row.busbwGBs).toBeCloseTo((row.bytes / (row.timeUs * 1e3)) * 1.5, 2);
      }
      expect(
        printed.some((l) =>
          l.startsWith("# 2 processes x 2 ranks under mpirun: allReduce fp32 sum, each op awaited; mpi = Open MPI's MPI_Allreduce on 4 processes"),
        ),
      ).toBe(true);
    },
    300_000,
  );

  it('checks the rows the speed targets name: measured / target, >= 1 holds', () => {
    const small = { op: 'allReduce' as const, ranks: 16, bytes: 4096, efficiency: 0.01 };
    expect(checkTarget({ ...small, timeUs: 100 })).toEqual({ label: 'p50 <= 110 us', ratio: 1.1, holds: true });
    expect(checkTarget({ ...small, timeUs: 220 })).toEqual({ label: 'p50 <= 110 us', ratio: 0.5, holds: false });
    const large = { op: 'allReduce' as const, ranks: 16, bytes: 64 * 1024 * 1024, timeUs: 1e5 };
    expect(checkTarget({ ...large, efficiency: 0.4 })).toEqual({ label: 'efficiency >= 0.8', ratio: 0.5, holds: false });
    expect(checkTarget({ ...large, efficiency: 0.8 })?.holds).toBe(true);
    // Another size, rank count or op: no target.
    expect(checkTarget({ ...small, bytes: 8192, timeUs: 1 })).toBeUndefined();
    expect(checkTarget({ ...small, ranks: 8, timeUs: 1 })).toBeUndefined();
    expect(checkTarget({ ...small, op: 'allGather', timeUs: 1 })).toBeUndefined();
    expect(TARGETS.map((t) => t.bytes)).toEqual([4096, 64 * 1024 * 1024]);
  });

  it('--completions none: allReduce enqueued without host completions is still exact and timed', async () => {
    const printed: string[] = [];
    const r = await runCollectivesBench(
      ['--ranks', '3', '--op', 'allReduce', '--min-bytes', '4096', '--max-bytes', '4096', '--processes', '0', '--completions', 'none'],
      (l) => printed.push(l),
    );
    expect(r.completions).toBe('none');
    expect(r.rows).toHaveLength(2);
    for (const row of r.rows) {
      expect(row.wrong).toBe(0);
      expect(row.timeUs).toBeGreaterThan(0);
      expect(row.cpuUsPerOp).toBeGreaterThan(0);
    }
    expect(printed).toContain('# --completions none: timed ops enqueued without a host completion, the stream synchronized once');
  }, 120_000);

  it('--completions awaited: each op awaited before the next is still exact, and every row carries its host wall time per op', async () => {
    const printed: string[] = [];
    const r = await runCollectivesBench(
      ['--ranks', '3', '--op', 'allReduce', '--min-bytes', '4096', '--max-bytes', '4096', '--processes', '0', '--completions', 'awaited'],
      (l) => printed.push(l),
    );
    expect(r.completions).toBe('awaited');
    expect(r.rows).toHaveLength(2);
    for (const row of r.rows) {
      expect(row.wrong).toBe(0);
      expect(row.timeUs).toBeGreaterThan(0);
      expect(row.wallUsPerOp).toBeGreaterThan(0);
    }
    expect(printed).toContain('# timed ops: each op awaited before the next (--completions awaited); the target column says so too');
  }, 120_000);

  it('rejects bad flags with a clear message', async () => {
    await expect(runCollectivesBench(['--ranks', 'zero'])).rejects.toThrow(/Expected an integer >= 1 for --ranks but received "zero"/);
    await expect(runCollectivesBench(['--op', 'allreduce'])).rejects.toThrow(/allreduce/);
    await expect(runCollectivesBench(['--min-bytes', '4096', '--max-bytes', '1024'])).rejects.toThrow(/--min-bytes 4096 is larger than --max-bytes 1024/);
    await expect(runCollectivesBench(['--ranks', '3', '--processes', '2'])).rejects.toThrow(/--ranks 3 is not a multiple of --processes 2/);
    await expect(runCollectivesBench(['--completions', 'none'])).rejects.toThrow(/--completions none runs allReduce only; add --op allReduce/);
    await expect(runCollectivesBench(['--completions', 'some'])).rejects.toThrow(/some/);
  });
});
