/**
 * The colocated full sync's executor: the planner (plan.ts) turns the strategy's weight
 * sources (parallel/weight-sources.ts) × the engine's weight slots (rollout/weight-slots.ts)
 * into one step per source, and this runs them, all on device, turning what the rank holds
 * into the engine's processed runtime layout (writes of the sync's one direct session, each
 * through the slot it lands in; no post-load processing). Everything is enqueued on `stream`
 * (the engine's stream), so buffers are reused in stream order without host waits. Per
 * step kind (every rank of a placement's communicator gets the same kind, so collectives
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
 *   Small Shard(0) sources that lie side by side in the rank's memory (fsdp2 keeps a unit's
 *   chunks in one flat shard) go together: ONE all-gather of the run of chunks into the
 *   staging, then one batched copy op slices every source out of it into the engine. A
 *   collective per tensor is a rendezvous of every rank's stream thread per tensor: a tiny
 *   model's 24 tensors cost ~2 ms of a colocated sync that moves 1.6 MB; by unit it is 4.
 *   A run stays within one bucket of staging; larger sources keep their direct path.
 * - otherwise: all parts all-gathered into the staging and re-cut into HF tensors (assembleHf).
 * Every step runs in the source's wire dtype (wire.ts): for a bf16 engine's matmul weights
 * the local piece is cast to bf16 first and the staging of those sources is bf16.
 */
import { copy, Tensor, type Stream } from '../runtime/device/device-index.js';
import { CopyRanges } from '../runtime/device/copy-ranges.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import { stridedRead, viewOf } from '../runtime/device/views.js';
import { assembleHf, scratchNumel } from '../parallel/weight-mapping.js';
import { numelOf, type WeightSource } from '../parallel/weight-sources.js';
import type { RolloutEngine } from '../rollout/engine.js';
import type { DirectSession } from '../rollout/weight-session.js';
import { expertSlotWrite, slotWrite, type DirectWrite } from '../rollout/direct-write.js';
import { groupSlots, slotGeometry, type SlotDescriptor } from '../rollout/weight-slots.js';
import { writeSliceRange } from '../rollout/slice-range.js';
import { planSync, type SyncStep } from './plan.js';
import { sameRuns } from './slice-match.js';
import { onWire, wireDtype } from './wire.js';
import { dtypeSize, type DType } from '../runtime/device/dtype.js';

export interface ColocateOut {
  engine: RolloutEngine;
  /** The sync's direct session on `engine`: every write goes through it. */
  session: DirectSession;
  stream: Stream;
  bucketBytes: number;
  /** This rank's slots, the writes go through (engine.weightSlots(); asked only when a plan is made). */
  slots: () => readonly SlotDescriptor[];
  /** The writes of HF tensor `hf` are left out (fault injection for verification tests; the plan is then made afresh). */
  skips?(hf: string): boolean;
  /** The slots may have been changed in place (an armed fault): plan afresh and keep no plan. */
  freshPlan?: boolean;
  /** Who publishes the sources (the strategy): with it, the plan is kept for the next sync of the same pair. */
  owner?: object;
  /** Collective completions to await at the end (every collective here is an all-gather: one each). */
  pending: Promise<void>[];
}

/** Slots of every TP rank of an engine's group (pure data; made once per engine). */
const groups = new WeakMap<RolloutEngine, SlotDescriptor[][]>();
/** The last plan per engine, per strategy (`owner`: the sources' owner) and the source layout it was made for. */
const plans = new WeakMap<RolloutEngine, WeakMap<object, { key: string; steps: SyncStep[] }>>();

/**
 * The plan of this sync. Planning reads only descriptors (the sources' placements and
 * mappings, the slots' regions and transforms — not the layout states, which the session
 * checks per write). An engine's slots are fixed by its config and TP rank, and a
 * strategy's sources by its layout, so the plan of one (engine, strategy) pair is made
 * once and reused while the sources' keys, parts and sizes stay the same: planning and
 * the slots it reads cost ~2 ms per sync, ~4% of a 514 MB colocated sync (bench sync,
 * fsdp2 dp2 → tp1, where the time is otherwise the all-gathers).
 */
function planOf(sources: readonly WeightSource[], out: ColocateOut): SyncStep[] {
  const { engine } = out;
  let group = groups.get(engine);
  if (!group) groups.set(engine, (group = groupSlots(engine.cfg, engine.shard.tpSize)));
  const plan = () => planSync(sources, { tpSize: engine.shard.tpSize, group, mine: { tpRank: engine.shard.tpRank, slots: out.slots() } }, 'colocate');
  if (out.freshPlan || !out.owner) return plan();
  let byOwner = plans.get(engine);
  if (!byOwner) plans.set(engine, (byOwner = new WeakMap()));
  let key = '';
  for (const s of sources) key += `${s.key}:${s.part}/${s.parts}:${s.localNumel}:${s.map.kind}|`;
  const last = byOwner.get(out.owner);
  if (last?.key === key) return last.steps;
  const steps = plan();
  byOwner.set(out.owner, { key, steps });
  return steps;
}

export function syncSources(sources: readonly WeightSource[], out: ColocateOut): number {
  const { engine } = out;
  const steps = planOf(sources, out);
  // Each source moves in the dtype the engine holds it in (wire.ts): a bf16 engine's matmul
  // weights are cast on this rank before the all-gathers, which then move half the bytes.
  const wires = sources.map((s) => wireDtype(engine.cfg, s, engine.dtype));
  const runs = adjacentRuns(sources, steps, wires, out);
  // Per wire dtype, one staging (the most any source gathers at once) and one scratch (the largest re-cut), made on first use.
  const buffers = new Map<DType, { staging: Tensor | null; scratch: Tensor | null; stagingNumel: number; scratchMax: number }>();
  sources.forEach((s, i) => {
    const w = wires[i]!;
    let b = buffers.get(w);
    if (!b) buffers.set(w, (b = { staging: null, scratch: null, stagingNumel: 16, scratchMax: 16 }));
    const run = runs.get(i);
    b.stagingNumel = Math.max(b.stagingNumel, run ? s.parts * run.span : stagingNeed(s, steps[i]!, out.bucketBytes));
    if (steps[i]!.kind === 'whole' || steps[i]!.kind === 'gather') b.scratchMax = Math.max(b.scratchMax, scratchNumel(s));
  });
  try {
    let skipTo = 0;
    sources.forEach((s0, i) => {
      if (i < skipTo) return; // gathered with its run
      const run = runs.get(i);
      if (run) {
        const b = buffers.get(wires[i]!)!;
        gatherRun(sources, i, run, out, viewOf((b.staging ??= Tensor.empty(engine.device, [b.stagingNumel], wires[i]!)), [s0.parts * run.span]));
        skipTo = run.end;
        return;
      }
      const step = steps[i]!;
      const wire = wires[i]!;
      const b = buffers.get(wire)!;
      const stage = (n: number) => viewOf((b.staging ??= Tensor.empty(engine.device, [b.stagingNumel], wire)), [n]);
      const scratchOf = () => (b.scratch ??= Tensor.empty(engine.device, [b.scratchMax], wire));
      const local = onWire(s0.local, wire, out.stream);
      const s: WeightSource = local === s0.local ? s0 : { ...s0, local };
      try {
        switch (step.kind) {
          case 'local':
            return writeLocal(s, step, out);
          case 'whole':
            return writeAll(s, step, s.local, scratchNumel(s) ? scratchOf() : null, out);
          case 'experts':
            return gatherExperts(s, step, out, stage);
          case 'stream':
            return streamShard0(s, step, out, stage);
          case 'gather': {
            const all = stage(s.parts * s.localNumel);
            out.pending.push(s.comm!.allGather(s.local, all, out.stream));
            return writeAll(s, step, all, scratchNumel(s) ? scratchOf() : null, out);
          }
          default:
            throw new InvalidArgumentError(`Colocated sync: the planner gave source ${s.key} a '${step.kind}' step, which is server-only.`, { source: s.key });
        }
      } finally {
        if (local !== s0.local) local.release(); // freed once the enqueued transfers and writes that read it are done
      }
    });
  } finally {
    for (const b of buffers.values()) {
      b.staging?.release();
      b.scratch?.release();
    }
  }
  return sources.length;
}

/**
 * A run of adjacent Shard(0) sources gathered together: sources [start, end), `span` elements of
 * each rank's memory; `writes[i - start]` are source i's direct writes.
 */
interface Run {
  end: number;
  span: number;
  writes: DirectWrite[][];
}

/**
 * Runs of at least two consecutive 'stream' sources whose local chunks are adjacent in one
 * buffer (no cast for the wire), over the same communicator, every write a slice write, and
 * whose gathered run fits a bucket; keyed by the run's first source. Every rank of the
 * communicator must issue the same gathers, so the verdict reads only what is the same on all:
 * the sources' sizes and the strategy's layout (one flat shard per unit on every rank), the
 * plan's step kinds and the writes' kinds (every engine TP rank's slot of a tensor has the same
 * transform); a fault that skips a tensor's writes on one rank leaves no writes, which join.
 */
function adjacentRuns(sources: readonly WeightSource[], steps: readonly SyncStep[], wires: readonly DType[], out: ColocateOut): Map<number, Run> {
  const runs = new Map<number, Run>();
  const writes: DirectWrite[][] = [];
  const writesAt = (i: number) => (writes[i] ??= writesOf(steps[i]!, hfOf(sources[i]!), out));
  const joins = (s: WeightSource, i: number) =>
    steps[i]!.kind === 'stream' && wires[i] === s.local.dtype && s.local.isContiguous && writesAt(i).every((w) => w.range);
  let i = 0;
  while (i < sources.length) {
    const a = sources[i]!;
    const cap = Math.floor(out.bucketBytes / dtypeSize(a.local.dtype) / a.parts);
    let j = i + 1,
      span = a.localNumel;
    if (joins(a, i) && span <= cap) {
      for (; j < sources.length; j++) {
        const b = sources[j]!,
          prev = sources[j - 1]!;
        const adjacent = b.local.buffer === a.local.buffer && b.local.byteOffset === prev.local.byteOffset + prev.local.nbytes;
        if (!adjacent || b.comm !== a.comm || b.parts !== a.parts || span + b.localNumel > cap || !joins(b, j)) break;
        span += b.localNumel;
      }
    }
    if (j - i >= 2) runs.set(i, { end: j, span, writes: writes.slice(i, j) });
    i = Math.max(j, i + 1);
  }
  return runs;
}

/**
 * One all-gather of the run's chunks (rank q's run lands at q·span of `buf`), then every
 * source's slice writes from it, rank by rank, in one batched copy op (strided reads of
 * whole rows, when a write needs them, are their own ops).
 */
function gatherRun(sources: readonly WeightSource[], start: number, run: Run, out: ColocateOut, buf: Tensor): void {
  const a = sources[start]!;
  const dp = a.parts;
  const mine = new Tensor(a.local.device, a.local.buffer, a.local.dtype, [run.span], undefined, a.local.byteOffset);
  out.pending.push(a.comm!.allGather(mine, buf, out.stream));
  const list = new CopyRanges();
  let rel = 0;
  for (let i = start; i < run.end; i++) {
    const s = sources[i]!;
    const chunk = s.localNumel,
      total = numelOf(s.shape);
    for (const w of run.writes[i - start]!) {
      out.session.writeInPlace(w.param, (dst, st) => {
        for (let q = 0; q < dp; q++) {
          const m = Math.max(0, Math.min(chunk, total - q * chunk));
          if (m) writeSliceRange(dst, viewOf(buf, [m], q * run.span + rel), q * chunk, w.range!, st, list);
        }
      });
    }
    rel += chunk;
  }
  list.enqueue(out.stream);
}

/** The HF tensor a Shard(0) source's writes are named by. */
function hfOf(s: WeightSource): string {
  return s.map.kind === 'identity' ? s.map.hf : s.key;
}

/** The direct writes of HF tensor `hf` through this rank's slots of it (none when a fault skips it). */
function writesOf(step: SyncStep, hf: string, out: ColocateOut): DirectWrite[] {
  if (out.skips?.(hf)) return [];
  return step.slots.filter((x) => x.hf === hf).map(slotWrite);
}

function stagingNeed(s: WeightSource, step: SyncStep, bucketBytes: number): number {
  if (step.kind === 'gather') return s.parts * s.localNumel;
  if (step.kind === 'experts') return s.parts * numelOf(s.shape.slice(1));
  if (step.kind === 'stream') return s.parts * Math.min(perRank(s, bucketBytes), Math.max(1, s.localNumel));
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

function writeAll(s: WeightSource, step: SyncStep, parts: Tensor, scratch: Tensor | null, out: ColocateOut): void {
  for (const [hf, full] of assembleHf(s, parts, scratch, out.stream)) {
    for (const w of writesOf(step, hf, out)) out.session.writeInPlace(w.param, (dst, st) => w.write(dst, full, st));
  }
}

// ---- local: the piece is the engine's slice of the same TP rank -------------------------

/**
 * The step was planned from the slots of every engine TP rank (the same verdict on every
 * rank); the writes follow this engine's own slots, and a write whose region no longer is
 * the piece's (a fault injected into them) is left out for verification to find.
 */
function writeLocal(s: WeightSource, step: SyncStep, out: ColocateOut): void {
  for (const { view, slot } of step.local!.views) {
    const mine = out.skips?.(slot.hf) ? [] : step.slots.filter((x) => x.hf === slot.hf);
    if (mine.length !== 1 || !sameRuns(view, slotGeometry(mine[0]!))) continue;
    const at = mine[0]!.dstOffset;
    out.session.writeInPlace(mine[0]!.param, (dst, st) => {
      stridedRead(viewOf(dst.reshape([dst.numel]), [numelOf(view.shape)], at), s.local, view.shape, view.local, view.localOffset, st);
    });
  }
}

// ---- experts: one all-gather over the group per local expert ----------------------------

function gatherExperts(s: WeightSource, step: SyncStep, out: ColocateOut, stage: (n: number) => Tensor): void {
  const slot = step.slots.find((x) => x.transform === 'expert-swap');
  if (!slot) {
    throw new InvalidArgumentError(
      `Weight sync: source ${s.key} maps experts to ${JSON.stringify(s.map)}, which is no fused expert slot of the engine. HINT: the strategy and the engine must run the same MoE config.`,
      { source: s.key },
    );
  }
  const row = numelOf(s.shape.slice(1)),
    El = s.localNumel / row,
    E = s.shape[0]!;
  const { session, stream } = out;
  for (let j = 0; j < El; j++) {
    const all = stage(s.parts * row);
    out.pending.push(s.comm!.allGather(viewOf(s.local, [row], j * row), all, stream));
    for (let q = 0; q < s.parts; q++) {
      if (q * El + j >= E) continue;
      const w = expertSlotWrite(slot, q * El + j);
      const piece = viewOf(all, s.shape.slice(1), q * row);
      session.writeInPlace(w.param, (dst, st) => w.write(dst, piece, st));
    }
  }
}

// ---- Shard(0) identity: streamed dim-0 chunks --------------------------------------------

function streamShard0(s: WeightSource, step: SyncStep, out: ColocateOut, stage: (n: number) => Tensor): void {
  const comm = s.comm!,
    dp = s.parts,
    chunk = s.localNumel,
    hf = hfOf(s);
  const per = perRank(s, out.bucketBytes);
  const { stream, engine, session } = out;
  const gathers = Math.max(1, Math.ceil(chunk / per));
  const total = numelOf(s.shape),
    pad = dp * chunk;
  const writes = writesOf(step, hf, out);
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
    full = asm = Tensor.empty(engine.device, [pad], s.local.dtype);
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
