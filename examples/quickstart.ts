/**
 * Ascent quickstart: every rank computes on its own device, then the ranks meet
 * through actors.
 *
 *   npx launch --nproc 16 examples/quickstart.ts
 *
 * Each rank builds two matrices on its device, multiplies them with the fast
 * kernel and the reference kernel on its own stream, checks that both agree, and
 * exposes a small "stats" actor. Rank 0 (the leader) then asks every rank for its
 * result and device statistics through typed actor refs and prints a summary.
 */
import { arange, matmul, scale, Tensor, type RankContext } from 'ascent';

interface RankReport {
  rank: number;
  checksum: number;
  maxAbsDiff: number;
  peakBytes: number;
  hostSyncs: number;
}

export async function main(ctx: RankContext): Promise<void> {
  const n = 128;
  const stream = ctx.device.newStream();
  // A = (i + rank) / n, B = A^T scaled: different data on every rank.
  const a = scale(arange(ctx.device, n * n, { start: ctx.rank, dtype: 'fp32', stream }).reshape([n, n]), 1 / (n * n), { stream });
  const fast = matmul(a, a, { transB: true, stream });
  const reference = matmul(a, a, { transB: true, stream, impl: 'reference' });
  const [f, r] = await Promise.all([fast.toArray({ stream }), reference.toArray({ stream })]);
  let maxAbsDiff = 0;
  let checksum = 0;
  for (let i = 0; i < f.length; i++) {
    maxAbsDiff = Math.max(maxAbsDiff, Math.abs(Number(f[i]) - Number(r[i])));
    checksum += Number(f[i]);
  }
  const stats = ctx.device.stats();
  const report: RankReport = { rank: ctx.rank, checksum, maxAbsDiff, peakBytes: stats.peak, hostSyncs: stats.hostSyncs };
  ctx.actors.expose('stats', { report: () => report });
  for (const t of [a, fast, reference]) t.release();

  if (ctx.isLeader) {
    const mesh = await ctx.actors.mesh<{ report(): RankReport }>('stats');
    const reports = await mesh.call('report');
    for (const rep of reports) {
      ctx.log.info(`rank ${String(rep.rank).padStart(2)}: checksum ${rep.checksum.toFixed(3)}  fast-vs-reference max |diff| ${rep.maxAbsDiff.toExponential(2)}  peak ${(rep.peakBytes / 1024).toFixed(0)} KiB  host syncs ${rep.hostSyncs}`);
    }
    const worst = Math.max(...reports.map((x) => x.maxAbsDiff));
    ctx.log.info(`${reports.length} ranks agree with the reference kernel (worst |diff| ${worst.toExponential(2)})`);
    if (worst > 1e-3) throw new Error(`fast and reference matmul disagree by ${worst}`);
  }
}
