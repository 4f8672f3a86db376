/**
 * The engine side of a server-mode sync (server.ts): where each received bucket segment
 * goes and how it reaches the engine's preprocessed parameters, without building
 * whole-model (or, when trainer tp == engine tp, any whole-tensor) temporaries.
 */
import { copy, Tensor, type Stream } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import { viewOf } from '../runtime/device/views.js';
import { dtypeSize, type DType } from '../runtime/device/dtype.js';
import { assembleHf, scratchNumel } from '../parallel/weight-mapping.js';
import type { HfView } from '../parallel/weight-sources.js';
import type { RolloutEngine } from '../rollout/engine.js';
import type { ReloadSession } from '../rollout/weight-session.js';
import type { SliceGeometry } from '../rollout/slice-range.js';
import type { Bucket, Segment } from './buckets.js';
import type { Assembly } from './server-plan.js';
import { planSync } from './plan.js';

/** How a source reaches the engine: flat HF ranges, this TP rank's local shard, or assembled and re-cut. */
interface Way {
  /** Per part: its HF views, when every one is a flat range of its piece (else null). */
  flat: HfView[][] | null;
  /** Engine tp == parts and the part of this TP rank is the engine's slice: per runtime parameter, the slice writes. */
  local: Array<{ param: string; geometry: SliceGeometry[] }> | null;
}

/**
 * Engine side: each received segment goes straight into the engine's preprocessed
 * parameters (no per-tensor temporaries). Where its bytes are one contiguous region of a
 * parameter on this rank (whole tensors like the embedding, rows of a TP slice, a local
 * shard) the broadcast delivers it there directly; otherwise it lands in a staging slot and is
 * sliced from there, by the way the planner (plan.ts) chose from the source's HF views
 * (parallel/weight-sources.ts) and this rank's weight slots (engine.weightSlots()): a source
 * whose every view is a flat range of its piece (Shard(0) chunks, whole tensors, stacked
 * experts, gate-up halves) is loaded as HF ranges (ReloadSession.loadRange); a piece whose
 * views are exactly this TP rank's engine slices (trainer tp == engine tp) goes in as a
 * local shard (ReloadSession.loadLocalRange); anything else is re-cut on the device
 * (assembleHf into one reused scratch, then ReloadSession.load) — from the slot when a
 * source arrives in one piece, else after assembling it whole (a buffer per source until
 * its last piece arrives).
 */
export class Receiver {
  private readonly got = new Map<string, number>();
  /** Trainer tp != engine tp: TP-split tensors being assembled, or received whole in one slot piece. */
  private readonly open = new Map<string, Tensor>();
  private readonly whole = new Map<string, Tensor>();
  private readonly scratch = new Map<DType, Tensor>();
  private readonly done = new Set<string>();
  private readonly ways = new Map<string, Way>();
  loaded = 0;

  constructor(
    private readonly engine: RolloutEngine,
    /** The sync's reload session on `engine`: every load goes through it. */
    private readonly session: ReloadSession,
    /** Every source the trainers send, by key (server-plan.ts assemblies()). */
    private readonly plan: Map<string, Assembly>,
    private readonly stream: Stream,
  ) {
    // Planned from this rank's slots as the sync sees them (after any injected fault).
    const list = [...plan.values()];
    const steps = planSync(
      list.map((a) => a.source),
      { tpSize: engine.shard.tpSize, mine: { tpRank: engine.shard.tpRank, slots: engine.weightSlots() } },
      'server',
    );
    list.forEach((a, i) => {
      const step = steps[i]!;
      this.ways.set(a.name, { flat: step.ranges ?? null, local: step.kind === 'local' ? step.local!.params : null });
    });
  }

  /**
   * Where each segment of `bucket` is received. The segments the sender packed (`packed`,
   * buckets.ts packSmall) arrive together at the start of the slot, at their packed offsets;
   * each other one straight into the engine parameter when its bytes form one contiguous
   * region there (no copy at all), else at an element offset of the slot after the packed
   * ones (64-byte aligned; `elems` in all).
   */
  route(bucket: Bucket, packed: { at: Array<number | null>; elems: number }): { direct: Array<Tensor | null>; offsets: number[]; elems: number } {
    const direct: Array<Tensor | null> = [],
      offsets: number[] = [];
    let at = packed.elems;
    bucket.segments.forEach((s, i) => {
      const p = packed.at[i];
      if (p != null) {
        direct.push(null);
        offsets.push(p);
        return;
      }
      const { a, part } = this.parse(s);
      const size = dtypeSize(a.wire);
      const n = s.bytes / size;
      const d = n ? this.target(a, part, s.tensorOffset / size, n) : null;
      direct.push(d);
      offsets.push(at);
      if (n && !d) at += Math.ceil(s.bytes / 64) * 16; // slot offsets count fp32 words, 64-byte aligned
    });
    return { direct, offsets, elems: at };
  }

  /** The dtype the source of segment `s` travels as (sync/wire.ts). */
  wireOf(s: Segment): DType {
    return this.parse(s).a.wire;
  }

  private parse(s: Segment): { a: Assembly; part: number } {
    const at = s.name.lastIndexOf('#');
    return { a: this.plan.get(s.name.slice(0, at))!, part: Number(s.name.slice(at + 1)) };
  }

  /**
   * A segment about to be received into `buf` (from route()); `end()`, called after the
   * broadcast is enqueued, slices a slot piece into the parameters (`direct`: nothing to
   * do) and completes the tensor when every byte of it arrived.
   */
  begin(s: Segment, buf: Tensor, direct: boolean): { buf: Tensor; end(): void } {
    const { a, part } = this.parse(s);
    return {
      buf,
      end: () => {
        if (s.bytes && !direct) this.write(a, part, buf, s.tensorOffset / dtypeSize(a.wire));
        const got = (this.got.get(a.name) ?? 0) + s.bytes;
        this.got.set(a.name, got);
        if (got === a.parts * a.partNumel * dtypeSize(a.wire)) this.finish(a);
      },
    };
  }

  /**
   * Runs `fn`, whose begin()/end() calls slice received pieces into the parameters, with
   * their copies enqueued as one op when it returns (ReloadSession.batchCopies): `fn` must
   * not enqueue anything that overwrites the slot it reads from (the next transfer comes after).
   */
  batch(fn: () => void): void {
    this.session.batchCopies(fn);
  }

  /** The engine-parameter region elements [off, off + n) of part `part` of `a` go to, when contiguous (else null). */
  private target(a: Assembly, part: number, off: number, n: number): Tensor | null {
    const way = this.ways.get(a.name)!;
    let t: Tensor | null = null;
    if (way.flat) {
      const v = way.flat[part]!.find((x) => off >= x.view.localOffset && off + n <= x.view.localOffset + x.view.shape[0]!);
      t = v ? this.session.target(v.hf, v.view.globalOffset + off - v.view.localOffset, n) : null; // padding is not delivered into the engine
    } else if (way.local && part === this.engine.shard.tpRank && way.local.length === 1) t = this.session.target(a.name, off, n, way.local[0]);
    // Bytes land in the parameter as they travel: only when it holds the wire dtype (else through a slot, cast by the loader).
    return t && t.dtype === a.wire ? t : null;
  }

  /** Elements [off, off + piece.numel) of part `part` of `a`. */
  private write(a: Assembly, part: number, piece: Tensor, off: number): void {
    const { engine, session } = this;
    const way = this.ways.get(a.name)!;
    if (way.flat) {
      // Each HF view of the part is a flat range of it: load what of it this piece holds.
      for (const v of way.flat[part]!) {
        const lo = v.view.localOffset,
          hi = lo + v.view.shape[0]!;
        const from = Math.max(lo, off),
          to = Math.min(hi, off + piece.numel);
        if (to > from) session.loadRange(v.hf, viewOf(piece, [to - from], from - off), v.view.globalOffset + from - lo);
      }
      return;
    }
    if (way.local) {
      if (part !== engine.shard.tpRank) return; // the other engine rank's shard
      for (const w of way.local) session.loadLocalRange(w.param, piece, off, w.geometry);
      return;
    }
    if (piece.numel === a.parts * a.partNumel) {
      this.whole.set(a.name, piece); // the whole source in one slot piece: re-cut from there
      return;
    }
    let t = this.open.get(a.name);
    if (!t) this.open.set(a.name, (t = Tensor.empty(engine.device, [a.parts * a.partNumel], a.wire)));
    copy(viewOf(t, [piece.numel], part * a.partNumel + off), piece, { stream: this.stream });
  }

  /** Every byte of `a` arrived: mark it loaded (or, assembled, re-cut and load it). */
  private finish(a: Assembly): void {
    const { engine, session } = this;
    const way = this.ways.get(a.name)!;
    this.done.add(a.name);
    if (way.flat) for (const hf of new Set(way.flat.flat().map((v) => v.hf))) session.loadDone(hf);
    else if (way.local) for (const w of way.local) session.loadLocalDone(w.param);
    else {
      const t = this.whole.get(a.name) ?? this.open.get(a.name)!;
      const owned = !this.whole.delete(a.name);
      this.open.delete(a.name);
      // One scratch per wire dtype (the largest re-cut of that dtype) for every re-cut, reused in stream order.
      let scratch = this.scratch.get(a.wire);
      if (!scratch) {
        const most = Math.max(16, ...[...this.plan.values()].filter((x) => x.wire === a.wire).map((x) => scratchNumel(x.source)));
        this.scratch.set(a.wire, (scratch = Tensor.empty(engine.device, [most], a.wire)));
      }
      session.load(assembleHf(a.source, t, scratch, this.stream));
      if (owned) t.release();
    }
    this.loaded++;
  }

  checkComplete(): void {
    const missing = [...this.plan.keys()].filter((n) => !this.done.has(n));
    if (missing.length)
      throw new InvalidArgumentError(
        `ServerSync: tensors never arrived: ${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ` and ${missing.length - 5} more` : ''}.`,
      );
  }

  release(): void {
    for (const t of this.open.values()) t.release();
    this.open.clear();
    this.whole.clear();
    for (const t of this.scratch.values()) t.release();
    this.scratch.clear();
  }
}
