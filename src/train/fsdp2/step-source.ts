/**
 * The ParamSource of one FSDP2 forward + backward (see ParamSource in model/qwen3.ts).
 *
 * Forward, per model block: `blockStart` all-gathers the block's units (one
 * all-gather each, none for a unit still gathered) and hands out leaf Vars viewing the
 * unsharded parameters; `blockEnd` frees them (reshard after forward) unless the unit is
 * one the strategy keeps (`keep`: the root units, i.e. the embedding and the final norm +
 * LM head, which backward needs first or a tied head gathers again, as in FSDP2; every
 * unit when not resharding), and records an identity node on the block's output. In backward that node runs right before the block's own nodes
 * (reverse recording order) and after every later block's: it reduce-scatters the
 * gradients of the blocks whose backward is complete, re-gathers this block's
 * parameters (swapping the Vars' values) and sets each Var's `sink`, which collects the
 * full gradients backward produces; the flush packs them rank-major for the reduce-scatter
 * in one copy op (no zeroed slot, no per-parameter add; see pack()). A
 * unit's gathered values are shared by every gather of it that is live (the tied
 * embedding: the embed and head blocks) and given back when the last one lets go.
 * `finish()` reduce-scatters what is left (the embedding) after tape.backward.
 * Frozen units (LoRA base weights) are gathered the same way (backward needs them for
 * the input gradients) but collect no gradients and get no reduce-scatter.
 *
 * When the communicator spans processes, a collective's result is ready only when its
 * promise resolves (Communicator.spansProcesses), and forward / backward run synchronously
 * on the host, so nothing in them can await. Then `prefetch()` gathers every unit (awaited)
 * before forward, the gathered values stay until the step ends, and the gradients wait in
 * their slots for `finish()`, which reduce-scatters them one by one (awaited). Correct
 * across processes at the memory of unsharded parameters and gradients; in one process
 * the pipelined, resharding path above is unchanged.
 *
 * In one process, when every unit stays gathered for the whole step (a small model) and all are
 * fp32, the step's collectives are fused (fused-comm.ts): `prefetch()` enqueues ONE all-gather of
 * every unit, which the blocks take their values from, and the flushes pack the gradients into one
 * bucket that `finish()` reduce-scatters at once. Same values, bit for bit, fewer meeting points.
 */
import { InternalError, InvalidArgumentError } from '../../runtime/errors.js';
import type { Communicator } from '../../runtime/comm/comm.js';
import { axpy, fill, type Stream, type Tensor } from '../../runtime/device/device-index.js';
import { Var, type Tape } from '../../model/autograd.js';
import type { ModelConfig } from '../../model/config.js';
import type { ModelBlock, ParamSource } from '../../model/qwen3.js';
import { blockUnits, type FlatLayout, type FlatUnit } from './layout.js';
import type { SlotPool } from './slot-pool.js';
import {
  fullView,
  gatherUnit,
  gatherUnitAwaited,
  packGrads,
  packGradSources,
  reduceScatterPacked,
  reduceScatterPackedAwaited,
  valueView,
  zeroGradSlot,
  type GatherStats,
  type PackTarget,
} from './unit-comm.js';
import { fusable, gatherAll, GradBucket, stepGathers } from './fused-comm.js';

/** One gather of one unit for one block (a tied embedding is gathered twice: embed and head). */
interface Gathered {
  unit: FlatUnit;
  vars: Var[];
  values: Tensor | null;
  /** While its block's backward runs: the gradients backward handed each parameter's Var (its `sink`), in order. */
  grads: Tensor[][] | null;
}

export interface UnitState {
  /** This rank's flat parameter shard [S]. */
  param: Tensor;
  /** This rank's flat gradient shard [S] (absent for a frozen unit). */
  grad?: Tensor;
  /**
   * The gradient shard is zero but was not written (zeroGrad defers the fill): the step's
   * first reduce-scatter writes it instead of adding to it, and readers fill it first.
   */
  gradUnset?: boolean;
}

/** Fills a gradient shard zeroGrad left unwritten (`gradUnset`), before something adds to or reads it. */
export function settleGrad(st: UnitState, stream: Stream): void {
  if (!st.gradUnset) return;
  fill(st.grad!, 0, { stream });
  st.gradUnset = false;
}

const blockName = (b: ModelBlock) => (b.kind === 'layer' ? `layer ${b.index}` : b.kind);

export class StepSource implements ParamSource {
  private current: { block: ModelBlock; gathered: Gathered[] } | null = null;
  /** Gathers whose gradients are being accumulated (their block's backward is running or done). */
  private pendingGrads: Gathered[] = [];
  private readonly live: Gathered[] = [];
  /** Across processes: each unit's values gathered by prefetch() (owned here, not by a Gathered). */
  private readonly prefetched = new Map<FlatUnit, Tensor>();
  /** Across processes: gradients packed rank-major (a send slot each), waiting for finish(). */
  private deferred: Array<{ unit: FlatUnit; send: Tensor }> = [];
  private readonly awaited: boolean;
  /** In one process: each gathered unit's values and how many live gathers hold them. */
  private readonly held = new Map<FlatUnit, { values: Tensor; refs: number }>();
  /** Bytes this step's all-gathers moved into this rank. */
  readonly gathered: GatherStats = { bytes: 0 };
  /** In one process, every unit kept gathered and small: the step's one reduce-scatter (fused-comm.ts); else null. */
  private readonly bucket: GradBucket | null;

  /** Whether this step's collectives are fused (a small model kept gathered, in one process). */
  get fused(): boolean {
    return this.bucket !== null;
  }

  constructor(
    private readonly cfg: ModelConfig,
    private readonly layout: FlatLayout,
    private readonly state: ReadonlyMap<FlatUnit, UnitState>,
    private readonly comm: Communicator,
    private readonly pool: SlotPool,
    private readonly stream: Stream,
    /** Units whose values stay gathered after their block's forward (not resharded). */
    private readonly keep: ReadonlySet<FlatUnit>,
    /** fp32 zeros for the padding rows of packed gradients (at least padNumel of the layout). */
    private readonly zeros: Tensor,
  ) {
    this.awaited = comm.spansProcesses;
    const all = layout.units;
    this.bucket =
      !this.awaited && all.every((u) => keep.has(u)) && fusable(all, comm.size)
        ? new GradBucket(
            stepGathers(layout, cfg).filter((u) => u.trainable),
            comm.size,
            pool.device,
          )
        : null;
  }

  /**
   * Across processes: gathers every unit before forward, awaiting each all-gather (see the header).
   * In one process with fused collectives: one all-gather of every unit, enqueued (the blocks take
   * their values from it). Otherwise a no-op.
   */
  async prefetch(): Promise<void> {
    if (this.bucket) {
      const shards = new Map(this.layout.units.map((u) => [u, this.state.get(u)!.param] as const));
      for (const [unit, values] of gatherAll(this.layout.units, shards, this.comm, this.pool, this.stream, this.gathered))
        this.held.set(unit, { values, refs: 0 });
      return;
    }
    if (!this.awaited) return;
    for (const unit of this.layout.units) {
      this.prefetched.set(unit, await gatherUnitAwaited(unit, this.state.get(unit)!.param, this.comm, this.pool, this.stream, this.gathered));
    }
  }

  /**
   * This unit's unsharded values: prefetched across processes; in one process, the values
   * another live gather holds, else gathered now (stream-ordered). Each call in one process
   * takes a reference that freeValues() gives back.
   */
  private valuesOf(unit: FlatUnit): Tensor {
    if (!this.awaited) {
      const h = this.held.get(unit);
      if (h) {
        h.refs++;
        return h.values;
      }
      const values = gatherUnit(unit, this.state.get(unit)!.param, this.comm, this.pool, this.stream, this.gathered);
      this.held.set(unit, { values, refs: 1 });
      return values;
    }
    const v = this.prefetched.get(unit);
    if (!v) throw new InternalError(`FSDP2: unit ${unit.key} was not prefetched; call prefetch() before forward when the communicator spans processes.`);
    return v;
  }

  blockStart(_tape: Tape, block: ModelBlock): void {
    if (this.current) throw new InvalidArgumentError(`FSDP2: block ${blockName(block)} started inside block ${blockName(this.current.block)}.`);
    const gathered = blockUnits(this.layout, this.cfg, block).map((unit) => {
      const values = this.valuesOf(unit);
      const vars = unit.params.map((p, i) => new Var(valueView(unit, values, i, this.comm.size), unit.trainable, p.name));
      const g: Gathered = { unit, vars, values, grads: null };
      this.live.push(g);
      return g;
    });
    this.current = { block, gathered };
  }

  param(_tape: Tape, name: string): Var {
    const cur = this.current;
    if (!cur) throw new InvalidArgumentError(`FSDP2: parameter ${name} was requested outside any model block (its unit is not gathered).`, { name });
    for (const g of cur.gathered) {
      const i = g.unit.params.findIndex((p) => p.name === name);
      if (i >= 0) return g.vars[i]!;
    }
    throw new InvalidArgumentError(
      `FSDP2: parameter ${name} is not part of block ${blockName(cur.block)} (units ${cur.gathered.map((g) => g.unit.key).join(', ')}).`,
      { name },
    );
  }

  blockEnd(tape: Tape, block: ModelBlock, output: Var): Var {
    const cur = this.current;
    if (!cur || cur.block.kind !== block.kind || (block.kind === 'layer' && (cur.block as { index: number }).index !== block.index)) {
      throw new InvalidArgumentError(`FSDP2: block ${blockName(block)} ended but ${cur ? blockName(cur.block) : 'no block'} was started.`);
    }
    this.current = null;
    for (const g of cur.gathered) if (!this.keep.has(g.unit)) this.freeValues(g);
    const out = new Var(output.value, false, output.name);
    tape.record(`fsdp2.blockEnd(${blockName(block)})`, [output], [out], ([dy]) => {
      this.flushPending();
      for (const g of cur.gathered) this.prepareBackward(g);
      return [dy];
    });
    return out;
  }

  /** Reduce-scatters every gradient still pending (call after tape.backward); across processes, awaits each. */
  async finish(): Promise<void> {
    this.flushPending();
    if (this.bucket) {
      const grads = new Map([...this.state].filter(([u]) => u.trainable).map(([u, st]) => [u, st.grad!] as const));
      const written = this.bucket.reduceScatter(this.comm, grads, (u) => this.state.get(u)!.gradUnset === true, this.stream);
      for (const u of written) this.state.get(u)!.gradUnset = false; // after: a throw leaves a shard never written still to be filled
    }
    while (this.deferred.length > 0) {
      const { unit, send } = this.deferred.shift()!; // off the list first: reduceScatterPackedAwaited gives it back
      const st = this.state.get(unit)!;
      settleGrad(st, this.stream); // the awaited path adds to it
      await reduceScatterPackedAwaited(unit, send, st.grad!, this.comm, this.pool, this.stream);
    }
  }

  /** Gives every slot still held back to the pool (after the step, or on error). */
  dispose(): void {
    for (const g of this.live) {
      this.freeValues(g);
      g.grads = null;
    }
    this.live.length = 0;
    this.pendingGrads = [];
    this.bucket?.dispose();
    for (const d of this.deferred) this.pool.give(d.send);
    this.deferred = [];
    for (const v of this.prefetched.values()) this.pool.give(v);
    this.prefetched.clear();
    for (const h of this.held.values()) this.pool.give(h.values); // none left once every gather let go
    this.held.clear();
  }

  /** Lets go of a gather's values (freed with the unit's last reference); across processes they stay (prefetched, freed by dispose). */
  private freeValues(g: Gathered): void {
    if (this.awaited || !g.values) return;
    g.values = null;
    const h = this.held.get(g.unit);
    if (!h) throw new InternalError(`FSDP2: unit ${g.unit.key} has values but no reference to them.`);
    if (--h.refs > 0) return;
    this.held.delete(g.unit);
    this.pool.give(h.values);
  }

  private prepareBackward(g: Gathered): void {
    const dp = this.comm.size;
    if (!g.values) {
      g.values = this.valuesOf(g.unit);
      g.vars.forEach((v, i) => (v.value = valueView(g.unit, g.values!, i, dp)));
    }
    if (g.unit.trainable) {
      // No zeroed slot to accumulate into: the gradients are collected and packed at the flush.
      const grads: Tensor[][] = g.vars.map(() => []);
      g.grads = grads;
      g.vars.forEach((v, i) => (v.sink = (t) => grads[i]!.push(t)));
    }
    this.pendingGrads.push(g); // frozen: only its values are freed at the flush
  }

  private flushPending(): void {
    for (const g of this.pendingGrads) {
      this.freeValues(g);
      if (!g.grads) continue;
      const grads = g.grads;
      g.grads = null;
      for (const v of g.vars) v.sink = undefined;
      if (this.bucket) {
        this.pack(g.unit, grads, this.bucket.target(g.unit)); // reduce-scattered with every other unit by finish()
        continue;
      }
      // The send slot is given back by whoever takes it, once, even when that throws.
      const send = this.pack(g.unit, grads);
      if (this.awaited) this.deferred.push({ unit: g.unit, send });
      else {
        const st = this.state.get(g.unit)!;
        reduceScatterPacked(g.unit, send, st.grad!, this.comm, this.pool, this.stream, st.gradUnset === true);
        st.gradUnset = false; // after: a throw leaves a shard never written still to be filled
      }
    }
    this.pendingGrads = [];
  }

  /**
   * A unit's gradients (what backward handed each parameter) packed rank-major into a send slot
   * (or `into`: the step's gradient bucket).
   * One contiguous fp32 gradient per parameter (a model that uses each weight once): copied
   * straight into place with one op. Otherwise (a weight used twice, none reaching one, another
   * dtype) as the tape would: a zeroed slot, each gradient added in order, then packed.
   */
  private pack(unit: FlatUnit, grads: Tensor[][], into?: PackTarget): Tensor {
    const dp = this.comm.size;
    if (grads.every((l) => l.length === 1 && l[0]!.dtype === 'fp32' && l[0]!.isContiguous)) {
      return packGradSources(
        unit,
        grads.map((l) => l[0]!),
        this.zeros,
        dp,
        this.pool,
        this.stream,
        into,
      );
    }
    const slot = zeroGradSlot(unit, dp, this.pool, this.stream);
    try {
      grads.forEach((l, i) => {
        const full = fullView(unit, slot, i, dp);
        for (const t of l) axpy(full, 1, t, { stream: this.stream });
      });
    } catch (e) {
      this.pool.give(slot);
      throw e;
    }
    return packGrads(unit, slot, dp, this.pool, this.stream, into);
  }
}
