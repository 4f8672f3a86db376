/**
 * Weight sessions: the only ways weights enter a RolloutEngine. One is open on an engine
 * at a time (engine.beginReload() / engine.beginDirect()); while it is open the engine
 * refuses generate(), computeLogprobs(), prefillLogits(), sleep() and another session.
 *
 * - ReloadSession: a full reload in the PREPROCESSED layout — whole HF tensors, HF
 *   tensors streamed in ranges, local shards streamed in ranges, or regions filled in
 *   place through target() — then finish(), which runs the post-load processing
 *   (preprocessed → processed, the experts' dim swap) and closes the session. Only this
 *   class has that step, and a session finishes once, so processing runs exactly once per
 *   reload by construction.
 * - DirectSession: writes already in the PROCESSED (runtime) layout (colocated weight
 *   sync, LoRA adapter sync); there is nothing to process, finish() only closes it.
 *
 * abort() closes either without processing (a failed sync calls it in a finally, so the
 * engine is usable for the next attempt); an aborted reload leaves the parameters it
 * wrote 'preprocessed', so generating refuses until a reload finishes. A closed session
 * refuses every further call. finish() of a reload that is refused (a parameter not
 * completely loaded) changes nothing and leaves the session open: load what is missing
 * and finish again, or abort().
 */
import { Tensor, type Device, type Stream } from '../runtime/device/device-index.js';
import { cast, copy } from '../runtime/device/ops.js';
import { InvalidArgumentError, InvalidStateError, WeightLayoutError } from '../runtime/errors.js';
import { describe } from '../runtime/device/dtype.js';
import { CopyRanges } from '../runtime/device/copy-ranges.js';
import { isQwen35, type ModelConfig } from '../model/config.js';
import { hfNameOfPart, loadLocal, loadOne, loadRange, markLoaded, markLocalLoaded, rangeTarget, type HfEntry, type WeightSource } from './loader.js';
import { checkWriteShape, type RuntimeParams } from './runtime-params.js';
import type { SliceGeometry } from './slice-range.js';

/** What a session needs of its engine (handed over by the engine, which keeps the rest private). */
export interface SessionHost {
  readonly cfg: ModelConfig;
  readonly device: Device;
  readonly stream: Stream;
  readonly params: RuntimeParams;
  readonly plan: ReadonlyMap<string, HfEntry>;
  /** The session closed: the engine takes other calls (and sessions) again. */
  closed(session: WeightSession): void;
}

/** What an unknown tensor name should have been, for `cfg`'s model. */
function hfNamesHint(cfg: ModelConfig): string {
  const base = 'pass HF names (q_proj/k_proj/v_proj, gate_proj/up_proj/down_proj, mlp.experts.{e}.* or mlp.experts.gate_up_proj/down_proj';
  if (!isQwen35(cfg)) return `${base}).`;
  return `${base}, linear_attn.*, mlp.shared_expert.*); a Qwen3_5ForConditionalGeneration checkpoint names the text model model.language_model.*: strip that prefix to model.* and leave out model.visual.* and mtp.* (the engine runs the text model).`;
}

/** What both sessions share: open until finish() or abort(), then every call is refused. */
export abstract class WeightSession {
  #closedBy: string | null = null;

  protected constructor(
    protected readonly host: SessionHost,
    /** 'ReloadSession' or 'DirectSession': how messages name it. */
    readonly kind: 'ReloadSession' | 'DirectSession',
  ) {}

  get open(): boolean {
    return this.#closedBy === null;
  }

  /** How the engine names this session when it refuses a call because of it. */
  get label(): string {
    return this.kind === 'ReloadSession' ? 'a reload session (beginReload())' : 'a direct session (beginDirect())';
  }

  /** Refuses `what` once the session is closed. */
  protected check(what: string): void {
    if (this.#closedBy === null) return;
    const begin = this.kind === 'ReloadSession' ? 'beginReload' : 'beginDirect';
    throw new InvalidStateError(
      `${this.kind}.${what} called after the session was closed by ${this.#closedBy}. HINT: a session is used once; open a new one with engine.${begin}().`,
      { session: this.kind, closedBy: this.#closedBy },
    );
  }

  protected close(by: string): void {
    this.#closedBy = by;
    this.host.closed(this);
  }

  /** Closes the session without processing (e.g. in a failed sync's finally, when it is still open). */
  abort(): void {
    this.check('abort()');
    this.close('abort()');
  }
}

/** A full reload in the preprocessed layout; finish() processes it (see the file header). */
export class ReloadSession extends WeightSession {
  /** The copies of loadRange / loadLocalRange calls inside batchCopies(), enqueued as one op when it returns. */
  #batch: CopyRanges | null = null;

  constructor(host: SessionHost) {
    super(host, 'ReloadSession');
  }

  /**
   * Runs `fn`, collecting the contiguous copies of its loadRange / loadLocalRange calls into
   * ONE op enqueued when `fn` returns (a bucket of a small model is dozens of pieces of a few
   * hundred bytes: one op, not one each). Those copies run after everything else `fn`
   * enqueued, so within `fn` nothing may overwrite a piece passed to loadRange or read the
   * parameter regions it fills (a receiver loop that only loads from a received slot).
   * If `fn` throws, its collected copies are dropped (the sync fails and aborts the session).
   */
  batchCopies(fn: () => void): void {
    this.check('batchCopies()');
    if (this.#batch) return fn(); // nested: the outer call enqueues
    const list = (this.#batch = new CopyRanges());
    try {
      fn();
    } finally {
      this.#batch = null;
    }
    list.enqueue(this.host.stream);
  }

  /**
   * HF-named tensors (per-expert or fused experts; host or device, fp32 or bf16 (cast to each parameter's dtype), full unsharded
   * shapes), each sliced for this TP rank into the preprocessed layout. Returns how many
   * tensors were loaded.
   */
  load(weights: Iterable<readonly [string, WeightSource]>): number {
    this.check('load()');
    let n = 0;
    for (const [name, src] of weights) {
      const entry = this.host.plan.get(name);
      if (!entry) {
        throw new InvalidArgumentError(
          `ReloadSession.load(): unknown checkpoint tensor ${JSON.stringify(name)} for this ${this.host.cfg.modelType} config. HINT: ${hfNamesHint(this.host.cfg)}`,
          { tensor: name },
        );
      }
      loadOne(this.host.params, name, entry, src, this.host.stream);
      n++;
    }
    return n;
  }

  /**
   * Elements [from, from + piece.numel) of the full HF tensor `name` (a contiguous fp32 or bf16
   * device piece, e.g. a segment of a received bucket), sliced for this TP rank straight
   * into the preprocessed layout, with no temporaries. Call loadDone(name) once every
   * element of the tensor was passed.
   */
  loadRange(name: string, piece: Tensor, from: number): void {
    this.check('loadRange()');
    loadRange(this.host.params, name, this.entryOf(name), piece, from, this.host.stream, this.#batch ?? undefined);
  }

  /** Every element of HF tensor `name` was passed to loadRange() (or written through target()); its parts count as loaded. */
  loadDone(name: string): void {
    this.check('loadDone()');
    markLoaded(this.host.params, this.entryOf(name));
  }

  /**
   * A source that is already this rank's shard (e.g. a Megatron TP shard when trainer
   * tp == engine tp): elements [from, from + piece.numel) of it, written into runtime
   * parameter `param` (preprocessed layout) by the slice writes `geometry`. Call
   * loadLocalDone(param) once the whole shard was passed.
   */
  loadLocalRange(param: string, piece: Tensor, from: number, geometry: readonly SliceGeometry[]): void {
    this.check('loadLocalRange()');
    loadLocal(this.host.params, param, piece, from, geometry, this.host.stream, this.#batch ?? undefined);
  }

  /** Every part of runtime parameter `param` was written by loadLocalRange() (or through target()). */
  loadLocalDone(param: string): void {
    this.check('loadLocalDone()');
    markLocalLoaded(this.host.params, param);
  }

  /**
   * Zero copy: the region of this rank's preprocessed parameter that elements
   * [from, from + count) of HF tensor `name` (or, with `local`, of a local shard written
   * into runtime parameter `local.param` by `local.geometry`) go to, when it is one
   * contiguous region; else null (use loadRange / loadLocalRange). The caller fills the
   * returned view on the engine's stream, then calls loadDone / loadLocalDone.
   */
  target(name: string, from: number, count: number, local?: { param: string; geometry: readonly SliceGeometry[] }): Tensor | null {
    this.check('target()');
    const writes = local ? local.geometry.map((g) => ({ ...g, param: local.param })) : this.entryOf(name).writes;
    return rangeTarget(this.host.params, writes, from, count);
  }

  /** The loader plan entry of HF tensor `name` on this rank (its full shape and writes). */
  entry(name: string): HfEntry {
    this.check('entry()');
    return this.entryOf(name);
  }

  private entryOf(name: string): HfEntry {
    const entry = this.host.plan.get(name);
    if (!entry) {
      throw new InvalidArgumentError(
        `Unknown checkpoint tensor ${JSON.stringify(name)} for this ${this.host.cfg.modelType} config. HINT: ${hfNamesHint(this.host.cfg)}`,
        {
          tensor: name,
        },
      );
    }
    return entry;
  }

  /**
   * The post-load processing, after every parameter was completely loaded; closes the
   * session. Refused (nothing changed, the session stays open) when a parameter is not.
   */
  finish(): void {
    this.check('finish()');
    const { params, plan, stream } = this.host;
    params.process(stream, (p, part) => hfNameOfPart(plan, p, part));
    this.close('finish()');
  }
}

/** Writes in the processed (runtime) layout; nothing to process, finish() closes it. */
export class DirectSession extends WeightSession {
  constructor(host: SessionHost) {
    super(host, 'DirectSession');
  }

  /**
   * Writes one runtime parameter (this rank's local tensor, processed-layout shape) from a
   * device tensor or host data. Allowed on a 'processed' or 'dropped' parameter.
   */
  write(name: string, src: WeightSource): void {
    this.check('write()');
    const { params, stream, device } = this.host;
    const p = params.get(name);
    if (p.state !== 'dropped' && p.state !== 'processed') {
      throw new WeightLayoutError(
        `DirectSession.write(${name}): the tensor is in the 'processed' layout but the parameter is '${p.state}'; expected a '${p.state}' tensor. HINT: ${p.state === 'preprocessed' ? 'a reload of it was aborted before finish(); run a full reload (engine.beginReload() … finish()) first.' : 'call wake() first.'}`,
        { parameter: name, expected: p.state, actual: 'processed' },
      );
    }
    const shape = src instanceof Tensor ? src.shape : src?.shape;
    if (!Array.isArray(shape))
      throw new InvalidArgumentError(`DirectSession.write(${name}): expected a Tensor or { shape, data: Float32Array } but received ${describe(src)}.`, {
        parameter: name,
      });
    checkWriteShape(p, shape, 'processed');
    if (src instanceof Tensor) {
      src.checkLive('src');
      if (src.dtype !== 'fp32' && src.dtype !== 'bf16')
        throw new InvalidArgumentError(`DirectSession.write(${name}): expected fp32 or bf16 but received ${src.dtype}. HINT: cast() first.`, {
          parameter: name,
        });
    } else if (!(src.data instanceof Float32Array)) {
      throw new InvalidArgumentError(`DirectSession.write(${name}): host data must be a Float32Array but received ${describe(src.data)}.`, { parameter: name });
    }
    this.writeInPlace(name, (dst) => {
      const flat = dst.reshape([dst.numel]);
      const from = src instanceof Tensor ? src.reshape([src.numel]) : Tensor.fromArray(device, src.data as Float32Array, [src.data.length], { stream });
      // The parameter's dtype (weight-dtype.ts): a cast when the source's differs.
      const t = from.dtype === flat.dtype ? from : cast(from, flat.dtype, { stream });
      copy(flat, t, { stream });
      if (t !== from) t.release();
      if (!(src instanceof Tensor)) from.release();
    });
  }

  /**
   * Writes one runtime parameter in place: `write(dst, stream)` enqueues on the engine's
   * stream writes covering the whole processed-layout tensor `dst` (possibly in several
   * parts, from different sources), in `dst`'s dtype (the parameter's, weight-dtype.ts). Allowed on a 'processed' or 'dropped' parameter; the
   * parameter is 'processed' afterwards.
   */
  writeInPlace(name: string, write: (dst: Tensor, stream: Stream) => void): void {
    this.check('writeInPlace()');
    const { params, stream } = this.host;
    const p = params.get(name);
    if (p.state !== 'dropped' && p.state !== 'processed') {
      throw new WeightLayoutError(
        `DirectSession.writeInPlace(${name}): a direct write is in the processed layout but the parameter is '${p.state}'. HINT: ${p.state === 'preprocessed' ? 'a reload of it was aborted before finish(); run a full reload (engine.beginReload() … finish()) first.' : 'call wake() first.'}`,
        { parameter: name, expected: 'processed', actual: p.state },
      );
    }
    params.ensureAllocated(p);
    write(p.view('processed'), stream);
    p.state = 'processed';
    for (const k of p.spec.parts) p.filled.add(k);
  }

  /** Closes the session (the writes need no processing). */
  finish(): void {
    this.check('finish()');
    this.close('finish()');
  }
}
