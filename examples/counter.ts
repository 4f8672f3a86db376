// examples/counter.ts — an actor: one instance per rank, constructed as new Counter(ctx, start).
import type { RankContext } from 'ascent';

export class Counter {
  private total: number;

  constructor(
    private readonly ctx: RankContext,
    start = 0,
  ) {
    this.total = start;
  }

  add(n: number): number {
    this.total += n;
    return this.total;
  }

  reset(): void {
    this.total = 0;
  }

  where(): string {
    return `rank ${this.ctx.rank} of ${this.ctx.worldSize}`;
  }
}
