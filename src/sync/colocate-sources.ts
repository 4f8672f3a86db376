/**
 * The trainer side of a colocated full sync: one planner over the strategy's weight
 * sources (parallel/weight-sources.ts), all on device, turning what the rank holds into the
 * engine's processed runtime layout through `out` (writes of the sync's one direct session;
 * no post-load processing). Everything is enqueued on `stream` (the engine's stream), so
 * buffers are reused in stream order without host waits. Per source, by its placement and
 * mapping (every rank of a placement's communicator takes the same branch, so collectives
 * match):
 *
 * - local: the engine's TP size equals the source's parts and every part's HF views are
 *   exactly the engine slices of the same TP rank (Megatron engine tp == trainer tp): the
 *   local piece is read straight into the engine's local tensors (qkv de-interleaved by
 *   strides), no collective.
 * - whole (one part): the HF tensors of the local piece (assembleHf) written directly.
 * - experts (stacked local experts over ep): local expert j of every rank arrives with one
 *   all-gather over the group and is written per expert.
 * - Shard(0) identity (fsdp2): dim-0 chunks all-gathered in pieces of at most
 *   bucketBytes / parts per rank (the same schedule on every rank). When the full tensor is
 *   one contiguous region of an engine parameter (tp 1, no padding), the all-gather writes
 *   straight into the engine: one read and one write of every byte, no staging. Otherwise
 *   pieces land in one bucket of staging and are sliced into the engine (slice-range.ts)
 *   piece by piece; a transposing write (fused experts) needs the padded full tensor,
 *   assembled in the staging (or, larger than a bucket, in a buffer of its own size).
 * - otherwise: all parts all-gathered into the staging and re-cut into HF tensors (assembleHf).
 */
import { copy, Tensor, type Stream } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import { stridedRead, viewOf } from '../runtime/device/views.js';
import { assembleHf, scratchNumel } from '../parallel/weight-mapping.js';
import { hfViews, numelOf, type AffineView, type WeightSource } from '../parallel/weight-sources.js';
import type { RolloutEngine } from '../rollout/engine.js';
import type { DirectSession } from '../rollout/weight-session.js';
import { expertDirectWrite, hfDirectWrites, type DirectWrite } from '../rollout/direct-write.js';
import { hfLoadPlan } from '../rollout/loader.js';
import { writeSliceRange } from '../rollout/slice-range.js';
import { tpShard } from '../rollout/tp-shard.js';
import { sameRuns } from './slice-match.js';

export interface ColocateOut {
  engine: RolloutEngine;
  /** The sync's direct session on `engine`: every write goes through it. */
  session: DirectSession;
  stream: Stream;
  bucketBytes: number;
  /** Writes the full HF tensor `name` into the engine (direct, processed layout). */
  writeHf(name: string, full: Tensor): void;
  /** The engine's direct writes of the HF tensor `name` on this rank. */
  directWrites(name: string): DirectWrite[];
  /** Collective completions to await at the end. */
  pending: Promise<void>[];
}

type Route = 'local' | 'whole' | 'experts' | 'stream' | 'gather';

export function syncSources(sources: readonly WeightSource[], out: ColocateOut): number {
  const routes = sources.map((s) => routeOf(s, out.engine));
  // One staging (the most any source gathers at once) and one scratch (the largest re-cut), made on first use.
  const stagingNumel = Math.max(16, ...sources.map((s, i) => stagingNeed(s, routes[i]!, out.bucketBytes)));
  const scratchMax = Math.max(16, ...sources.map((s, i) => (routes[i] === 'whole' || routes[i] === 'gather' ? scratchNumel(s) : 0)));
  let staging: Tensor | null = null,
    scratch: Tensor | null = null;
  const stage = (n: number) => viewOf((staging ??= Tensor.empty(out.engine.device, [stagingNumel], 'fp32')), [n]);
  const scratchOf = () => (scratch ??= Tensor.empty(out.engine.device, [scratchMax], 'fp32'));
  try {
    sources.forEach((s, i) => {
      switch (routes[i]!) {
        case 'local':
          return writeLocal(s, out);
        case 'whole':
          return writeAll(s, s.local, scratchNumel(s) ? scratchOf() : null, out);
        case 'experts':
          return gatherExperts(s, out, stage);
        case 'stream':
          return streamShard0(s, out, stage);
        case 'gather': {
          const all = stage(s.parts * s.localNumel);
          out.pending.push(s.comm!.allGather(s.local, all, out.stream));
          return writeAll(s, all, scratchNumel(s) ? scratchOf() : null, out);
        }
      }
    });
  } finally {
    (staging as Tensor | null)?.release();
    (scratch as Tensor | null)?.release();
  }
  return sources.length;
}

function routeOf(s: WeightSource, engine: RolloutEngine): Route {
  if (s.map.kind !== 'experts' && localMatch(s, engine)) return 'local';
  if (s.parts === 1 || !s.comm) return 'whole';
  if (s.map.kind === 'experts') return 'experts';
  if (s.placement.kind === 'shard' && s.placement.dim === 0 && s.map.kind === 'identity') return 'stream';
  return 'gather';
}

function stagingNeed(s: WeightSource, r: Route, bucketBytes: number): number {
  if (r === 'gather') return s.parts * s.localNumel;
  if (r === 'experts') return s.parts * numelOf(s.shape.slice(1));
  if (r === 'stream') return s.parts * Math.min(perRank(s, bucketBytes), Math.max(1, s.localNumel));
  return 0;
}

/** Elements each rank contributes to one all-gather of a streamed source (64-byte aligned): parts of them make a bucket. */
function perRank(s: WeightSource, bucketBytes: number): number {
  const per = Math.floor(bucketBytes / s.parts / 64) * 16;
  if (per < 16) {
    throw new InvalidArgumentError(
      `Weight sync: a bucket of ${bucketBytes} bytes over ${s.parts} ranks leaves less than 64 bytes per rank. HINT: use bucketBytes >= ${64 * s.parts}.`,
      { bucketBytes },
    );
  }
  return per;
}

function writeAll(s: WeightSource, parts: Tensor, scratch: Tensor | null, out: ColocateOut): void {
  for (const [hf, full] of assembleHf(s, parts, scratch, out.stream)) out.writeHf(hf, full);
}

// ---- local: the piece is the engine's slice of the same TP rank -------------------------

const plans = new WeakMap<RolloutEngine, Map<number, ReturnType<typeof hfLoadPlan>>>();

/** The direct write matching each HF view of part `part` on engine TP rank `part`, or null when one does not match. */
function matches(s: WeightSource, engine: RolloutEngine, part: number): Array<{ hf: string; view: AffineView }> | null {
  let byRank = plans.get(engine);
  if (!byRank) plans.set(engine, (byRank = new Map()));
  const shard = tpShard(engine.cfg, s.parts, part);
  let plan = byRank.get(part);
  if (!plan) byRank.set(part, (plan = hfLoadPlan(engine.cfg, shard)));
  const out: Array<{ hf: string; view: AffineView }> = [];
  for (const v of hfViews(s, part)) {
    const ws = hfDirectWrites(engine.cfg, shard, plan, v.hf);
    if (ws.length !== 1 || !sameRuns(v.view, ws[0]!.range)) return null;
    out.push({ hf: v.hf, view: v.view });
  }
  return out;
}

/** Every part's views are the engine slices of the same TP rank (the same verdict on every rank), and this engine is that rank. */
function localMatch(s: WeightSource, engine: RolloutEngine): boolean {
  if (engine.shard.tpSize !== s.parts || engine.shard.tpRank !== (s.comm?.rank ?? 0)) return false;
  for (let p = 0; p < s.parts; p++) if (!matches(s, engine, p)) return false;
  return true;
}

/**
 * The route was chosen from the loader's plans (the same verdict on every rank); the
 * writes follow this engine's plan as the sync sees it, and a write whose slice no longer
 * is the piece's (a fault injected into the plan) is left out for verification to find.
 */
function writeLocal(s: WeightSource, out: ColocateOut): void {
  for (const { hf, view } of matches(s, out.engine, s.part)!) {
    const ws = out.directWrites(hf);
    if (ws.length !== 1 || !sameRuns(view, ws[0]!.range)) continue;
    const write = ws[0]!;
    out.session.writeInPlace(write.param, (dst, st) => {
      stridedRead(viewOf(dst.reshape([dst.numel]), [numelOf(view.shape)], write.range!.dstOffset), s.local, view.shape, view.local, view.localOffset, st);
    });
  }
}

// ---- experts: one all-gather over the group per local expert ----------------------------

const FUSED = /^model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$/;

function gatherExperts(s: WeightSource, out: ColocateOut, stage: (n: number) => Tensor): void {
  const m = FUSED.exec(s.map.kind === 'experts' ? s.map.hf : '');
  if (!m)
    throw new InvalidArgumentError(`Weight sync: source ${s.key} maps experts to ${JSON.stringify(s.map)}, not a fused HF expert tensor.`, { source: s.key });
  const layer = Number(m[1]),
    fc = m[2] === 'gate_up_proj' ? 'fc1' : 'fc2';
  const row = numelOf(s.shape.slice(1)),
    El = s.localNumel / row,
    E = s.shape[0]!;
  const { engine, session, stream } = out;
  for (let j = 0; j < El; j++) {
    const all = stage(s.parts * row);
    out.pending.push(s.comm!.allGather(viewOf(s.local, [row], j * row), all, stream));
    for (let q = 0; q < s.parts; q++) {
      if (q * El + j >= E) continue;
      const w = expertDirectWrite(engine.cfg, engine.shard, layer, q * El + j, fc);
      const piece = viewOf(all, s.shape.slice(1), q * row);
      session.writeInPlace(w.param, (dst, st) => w.write(dst, piece, st));
    }
  }
}

// ---- Shard(0) identity: streamed dim-0 chunks --------------------------------------------

function streamShard0(s: WeightSource, out: ColocateOut, stage: (n: number) => Tensor): void {
  const comm = s.comm!,
    dp = s.parts,
    chunk = s.localNumel,
    hf = s.map.kind === 'identity' ? s.map.hf : s.key;
  const per = perRank(s, out.bucketBytes);
  const { stream, engine, session } = out;
  const gathers = Math.max(1, Math.ceil(chunk / per));
  const total = numelOf(s.shape),
    pad = dp * chunk;
  const writes = out.directWrites(hf);
  if (gathers === 1 && pad === total && writes.length === 1 && isWhole(writes[0]!)) {
    // The full tensor is one contiguous region of the engine parameter: gather straight into it.
    const w = writes[0]!;
    session.writeInPlace(w.param, (dst, st) => {
      out.pending.push(comm.allGather(s.local, viewOf(dst.reshape([dst.numel]), [pad], w.range!.dstOffset), st));
    });
    return;
  }
  if (writes.every((w) => w.range)) {
    // Stream pieces: rank q's piece [off, off + n) of its chunk is elements q·chunk + off… of the full tensor.
    for (let off = 0; off < chunk || off === 0; off += per) {
      const n = Math.min(per, chunk - off);
      const buf = stage(dp * n);
      out.pending.push(comm.allGather(viewOf(s.local, [n], off), buf, stream));
      for (let q = 0; q < dp; q++) {
        const from = q * chunk + off,
          m = Math.max(0, Math.min(n, total - from));
        if (!m) continue;
        for (const w of writes) session.writeInPlace(w.param, (dst, st) => writeSliceRange(dst, viewOf(buf, [m], q * n), from, w.range!, st));
      }
      if (n === 0) break;
    }
    return;
  }
  // A transposing write (fused experts): the padded full tensor is assembled first —
  // in the staging itself when it is one piece, else in a buffer of its own size.
  let full: Tensor;
  let asm: Tensor | null = null;
  if (gathers === 1) {
    full = stage(pad);
    out.pending.push(comm.allGather(s.local, full, stream));
  } else {
    full = asm = Tensor.empty(engine.device, [pad], 'fp32');
    for (let off = 0; off < chunk; off += per) {
      const n = Math.min(per, chunk - off);
      const buf = stage(dp * n);
      out.pending.push(comm.allGather(viewOf(s.local, [n], off), buf, stream));
      for (let q = 0; q < dp; q++) copy(viewOf(asm, [n], q * chunk + off), viewOf(buf, [n], q * n), { stream });
    }
  }
  for (const w of writes) session.writeInPlace(w.param, (dst, st) => w.write(dst, viewOf(full, s.shape), st));
  asm?.release(); // freed once the enqueued work that reads it is done
}

/** The write copies the whole source tensor, in order, to one contiguous region. */
function isWhole(w: DirectWrite): boolean {
  return !!w.range && w.range.start === 0 && w.range.len === w.range.view[w.range.dim];
}

/** PEFT adapter parameter names (`….lora_A.weight`, `….lora_B`). */
export function isLoraName(name: string): boolean {
  return /\.lora_[AB](\.|$)/.test(name);
}
