/**
 * The engine side of a server-mode sync (server.ts): where each received bucket segment
 * goes and how it reaches the engine's preprocessed parameters, without building
 * whole-model (or, when trainer tp == engine tp, any whole-tensor) temporaries.
 */
import { copy, Tensor, type Stream } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import { viewOf } from '../runtime/device/views.js';
import type { ModelConfig } from '../model/config.js';
import { perExpertNames } from '../model/params.js';
import type { RolloutEngine } from '../rollout/engine.js';
import type { ReloadSession } from '../rollout/weight-session.js';
import type { Bucket, Segment } from './buckets.js';
import { hfFromShards, hfNameOfReplicated, localShardWrites } from './megatron-hf.js';
import { assemblies, type Assembly, type SourceHeader } from './server-plan.js';

/**
 * Engine side: each received segment goes straight into the engine's preprocessed
 * parameters (no per-tensor temporaries). Where its bytes are one contiguous region of a
 * parameter on this rank (whole tensors like the embedding, rows of a TP slice, a local
 * shard) the broadcast delivers it there directly; otherwise it lands in a slot and is
 * sliced from there: fsdp2 chunks and whole Megatron tensors
 * (replicated, experts) are flat ranges of HF tensors (ReloadSession.loadRange); Megatron
 * TP shards go to the engine rank of the same tp rank as its local shard
 * (ReloadSession.loadLocalRange) when trainer tp == engine tp. Only with a different tp are
 * TP-split tensors re-cut on the device (hfFromShards into one reused scratch, then
 * ReloadSession.load) — from the slot when a tensor arrives in one piece, else after assembling
 * it whole (a buffer per tensor until its last piece arrives).
 */
export class Receiver {
  private readonly plan: Map<string, Assembly>;
  private readonly got = new Map<string, number>();
  /** Trainer tp != engine tp: TP-split tensors being assembled, or received whole in one slot piece. */
  private readonly open = new Map<string, Tensor>();
  private readonly whole = new Map<string, Tensor>();
  private scratch: Tensor | null = null;
  private readonly done = new Set<string>();
  private readonly sameTp: boolean;
  loaded = 0;

  constructor(
    private readonly engine: RolloutEngine,
    /** The sync's reload session on `engine`: every load goes through it. */
    private readonly session: ReloadSession,
    private readonly cfg: ModelConfig,
    private readonly header: SourceHeader,
    private readonly stream: Stream,
  ) {
    this.plan = assemblies(cfg, header);
    this.sameTp = header.kind === 'megatron' && header.tp === engine.shard.tpSize;
  }

  /**
   * Where each segment of `bucket` is received: straight into the engine parameter when its
   * bytes form one contiguous region there (no copy at all), else at an element offset of
   * the slot (those pieces packed, 64-byte aligned; `elems` in all).
   */
  route(bucket: Bucket): { direct: Array<Tensor | null>; offsets: number[]; elems: number } {
    const direct: Array<Tensor | null> = [], offsets: number[] = [];
    let at = 0;
    for (const s of bucket.segments) {
      const { a, part } = this.parse(s);
      const n = s.bytes / 4;
      const d = n ? this.target(a, part, s.tensorOffset / 4, n) : null;
      direct.push(d);
      offsets.push(at);
      if (n && !d) at += Math.ceil(n / 16) * 16;
    }
    return { direct, offsets, elems: at };
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
        if (s.bytes && !direct) this.write(a, part, buf, s.tensorOffset / 4);
        const got = (this.got.get(a.name) ?? 0) + s.bytes;
        this.got.set(a.name, got);
        if (got === a.parts * a.partNumel * 4) this.finish(a);
      },
    };
  }

  /** The engine-parameter region elements [off, off + n) of part `part` of `a` go to, when contiguous (else null). */
  private target(a: Assembly, part: number, off: number, n: number): Tensor | null {
    const { engine, session } = this;
    if (this.header.kind === 'fsdp2') {
      const from = part * a.partNumel + off;
      return from + n <= numelOf(a.shape) ? session.target(a.name, from, n) : null; // padding is not delivered into the engine
    }
    const spec = a.spec!;
    if (spec.expert !== undefined || spec.tp === 'replicated') {
      const hit = this.wholeNames(spec).find(([, lo, hi]) => off >= lo && off + n <= hi);
      return hit ? session.target(hit[0], off - hit[1], n) : null;
    }
    if (this.sameTp && part === engine.shard.tpRank) return session.target(spec.name, off, n, localShardWrites(this.cfg, spec, engine.shard));
    return null;
  }

  /** Elements [off, off + piece.numel) of part `part` of `a`. */
  private write(a: Assembly, part: number, piece: Tensor, off: number): void {
    const { engine, session } = this;
    if (this.header.kind === 'fsdp2') {
      // Chunk `part` of the padded full tensor: elements part·partNumel + off… (padding dropped).
      const from = part * a.partNumel + off, m = Math.min(piece.numel, numelOf(a.shape) - from);
      if (m > 0) session.loadRange(a.name, viewOf(piece, [m]), from);
      return;
    }
    const spec = a.spec!;
    if (spec.expert !== undefined || spec.tp === 'replicated') {
      for (const [hf, lo, hi] of this.wholeNames(spec)) {
        const from = Math.max(lo, off), to = Math.min(hi, off + piece.numel);
        if (to > from) session.loadRange(hf, viewOf(piece, [to - from], from - off), from - lo);
      }
      return;
    }
    if (this.sameTp) {
      if (part !== engine.shard.tpRank) return; // the other engine rank's shard
      const w = localShardWrites(this.cfg, spec, engine.shard);
      session.loadLocalRange(w.param, piece, off, w.geometry);
      return;
    }
    if (piece.numel === a.parts * a.partNumel) {
      this.whole.set(a.name, piece); // the whole tensor in one slot piece: re-cut from there
      return;
    }
    let t = this.open.get(a.name);
    if (!t) this.open.set(a.name, (t = Tensor.empty(engine.device, [a.parts * a.partNumel], 'fp32')));
    copy(viewOf(t, [piece.numel], part * a.partNumel + off), piece, { stream: this.stream });
  }

  /** HF tensors a whole (replicated or expert) Megatron tensor holds, as [name, first, end) flat element ranges of it. */
  private wholeNames(spec: NonNullable<Assembly['spec']>): Array<[string, number, number]> {
    const N = numelOf(spec.shape);
    if (spec.expert === undefined) return [[hfNameOfReplicated(spec), 0, N]];
    const n = perExpertNames(spec.layer!, spec.expert);
    return spec.name.endsWith('linear_fc1.weight') ? [[n.gate, 0, N / 2], [n.up, N / 2, N]] : [[n.down, 0, N]];
  }

  /** Every byte of `a` arrived: mark it loaded (or, assembled, re-cut and load it). */
  private finish(a: Assembly): void {
    const { engine, session } = this;
    this.done.add(a.name);
    if (this.header.kind === 'fsdp2') session.loadDone(a.name);
    else if (a.spec!.expert !== undefined || a.spec!.tp === 'replicated') for (const [hf] of this.wholeNames(a.spec!)) session.loadDone(hf);
    else if (this.sameTp) session.loadLocalDone(localShardWrites(this.cfg, a.spec!, engine.shard).param);
    else {
      const t = this.whole.get(a.name) ?? this.open.get(a.name)!;
      const owned = !this.whole.delete(a.name);
      this.open.delete(a.name);
      // One scratch (the largest TP-split tensor) for every re-cut, reused in stream order.
      this.scratch ??= Tensor.empty(engine.device, [Math.max(...[...this.plan.values()].filter((x) => x.spec?.tp !== 'replicated' && x.spec?.expert === undefined).map((x) => x.parts * x.partNumel))], 'fp32');
      session.load(hfFromShards(this.cfg, a.spec!, t, a.parts, this.scratch, this.stream));
      if (owned) t.release();
    }
    this.loaded++;
  }

  checkComplete(): void {
    const missing = [...this.plan.keys()].filter((n) => !this.done.has(n));
    if (missing.length) throw new InvalidArgumentError(`ServerSync: tensors never arrived: ${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ` and ${missing.length - 5} more` : ''}.`);
  }

  release(): void {
    for (const t of this.open.values()) t.release();
    this.open.clear();
    this.whole.clear();
    this.scratch?.release();
    this.scratch = null;
  }
}

function numelOf(s: readonly number[]): number {
  return s.reduce((a, b) => a * b, 1);
}
