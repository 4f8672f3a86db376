/**
 * The trainer side of a colocated full sync, one function per strategy, all on device:
 * each turns what the rank owns into the engine's processed runtime layout through
 * `out` (writes of the sync's one direct session; no post-load processing). Everything is enqueued on `stream`
 * (the engine's stream), so buffers are reused in stream order without host waits.
 *
 * - single: every HF tensor of the store, written directly.
 * - fsdp2: each parameter's dim-0 chunks are all-gathered in pieces of at most
 *   bucketBytes / dp per rank (the same schedule on every rank). When the full tensor is
 *   one contiguous region of an engine parameter (tp 1, no padding), the all-gather
 *   writes straight into the engine: one read and one write of every byte, no staging.
 *   Otherwise pieces land in one bucket of staging and are sliced into the engine
 *   (slice-range.ts) piece by piece; a transposing write (fused experts) needs the
 *   padded full tensor, assembled in the staging (or, larger than a bucket, in a buffer
 *   of its own size, freed once written).
 * - megatron (ep = 1): with engine tp == trainer tp and the same tp rank, TP shards go
 *   straight to the engine's shards (qkv de-interleaved per query group, fc1 = gate ‖ up
 *   already); otherwise each TP-split tensor is all-gathered over tp and re-cut.
 */
import { copy, Tensor, type Stream } from '../runtime/device/device-index.js';
import { InvalidArgumentError, InternalError } from '../runtime/errors.js';
import { stridedRead, viewOf } from '../runtime/device/views.js';
import type { ModelConfig } from '../model/config.js';
import { paramSpecs } from '../model/params.js';
import type { RolloutEngine } from '../rollout/engine.js';
import type { DirectSession } from '../rollout/weight-session.js';
import { expertDirectWrite, type DirectWrite } from '../rollout/direct-write.js';
import { writeSliceRange } from '../rollout/slice-range.js';
import type { Fsdp2Strategy } from '../train/fsdp2/strategy.js';
import type { FlatParam } from '../train/fsdp2/layout.js';
import type { MegatronStrategy } from '../train/megatron/strategy.js';
import { megatronSpecs } from '../train/megatron/bridge.js';
import type { SingleDeviceStrategy } from '../train/single.js';
import { hfFromShards, hfNameOfReplicated } from './megatron-hf.js';

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

const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

export function syncSingle(s: SingleDeviceStrategy, out: ColocateOut): number {
  let n = 0;
  for (const spec of paramSpecs(s.cfg, { expertLayout: 'fused' })) {
    out.writeHf(spec.name, s.store.get(spec.name).value);
    n++;
  }
  return n;
}

export function syncFsdp2(s: Fsdp2Strategy, out: ColocateOut): number {
  const { comm, plan } = s;
  const dp = comm.size;
  // Elements each rank contributes to one all-gather (64-byte aligned): dp of them make a bucket.
  const per = Math.floor(out.bucketBytes / dp / 64) * 16;
  if (per < 16) {
    throw new InvalidArgumentError(`Weight sync: a bucket of ${out.bucketBytes} bytes over ${dp} fsdp2 ranks leaves less than 64 bytes per rank. HINT: use bucketBytes >= ${64 * dp}.`, { bucketBytes: out.bucketBytes });
  }
  const shards = s.localShards();
  const list: Array<{ p: FlatParam; shard: Tensor }> = [];
  // LoRA adapters are not engine weights (an adapter sync sends them); the base goes in full.
  for (const u of plan.units) for (const p of u.params) if (!isLoraName(p.name)) list.push({ p, shard: shards.get(u.key)!.param });
  const { stream, engine, session } = out;
  const gathers = (chunk: number) => Math.max(1, Math.ceil(chunk / per));
  // Staging: one bucket at most (dp pieces of `per`), only as large as a piece actually needs.
  let staging: Tensor | null = null;
  const stage = (n: number) => viewOf((staging ??= Tensor.empty(engine.device, [dp * Math.min(per, Math.max(1, ...list.map(({ p }) => p.chunk)))], 'fp32')), [dp * n]);
  try {
    for (const { p, shard } of list) {
      const total = numel(p.shape), pad = dp * p.chunk;
      const writes = out.directWrites(p.name);
      // The collective schedule (one all-gather per piece of `per` elements of the chunk)
      // depends only on the trainer's layout, so every rank issues the same collectives
      // whatever its engine shard needs.
      if (gathers(p.chunk) === 1 && pad === total && writes.length === 1 && isWhole(writes[0]!)) {
        // The full tensor is one contiguous region of the engine parameter: gather straight into it.
        const w = writes[0]!;
        session.writeInPlace(w.param, (dst, st) => {
          out.pending.push(comm.allGather(viewOf(shard, [p.chunk], p.offset), viewOf(dst.reshape([dst.numel]), [pad], w.range!.dstOffset), st));
        });
        continue;
      }
      if (writes.every((w) => w.range)) {
        // Stream pieces: rank q's piece [off, off + n) of its chunk is elements q·chunk + off… of the full tensor.
        for (let off = 0; off < p.chunk || off === 0; off += per) {
          const n = Math.min(per, p.chunk - off);
          const buf = stage(n);
          out.pending.push(comm.allGather(viewOf(shard, [n], p.offset + off), buf, stream));
          for (let q = 0; q < dp; q++) {
            const from = q * p.chunk + off, m = Math.max(0, Math.min(n, total - from));
            if (!m) continue;
            for (const w of writes) session.writeInPlace(w.param, (dst, st) => writeSliceRange(dst, viewOf(buf, [m], q * n), from, w.range!, st));
          }
          if (n === 0) break;
        }
        continue;
      }
      // A transposing write (fused experts): the padded full tensor is assembled first —
      // in the staging itself when it is one piece, else in a buffer of its own size.
      let full: Tensor;
      let asm: Tensor | null = null;
      if (gathers(p.chunk) === 1) {
        full = stage(p.chunk);
        out.pending.push(comm.allGather(viewOf(shard, [p.chunk], p.offset), full, stream));
      } else {
        full = asm = Tensor.empty(engine.device, [pad], 'fp32');
        for (let off = 0; off < p.chunk; off += per) {
          const n = Math.min(per, p.chunk - off);
          const buf = stage(n);
          out.pending.push(comm.allGather(viewOf(shard, [n], p.offset + off), buf, stream));
          for (let q = 0; q < dp; q++) copy(viewOf(asm, [n], q * p.chunk + off), viewOf(buf, [n], q * n), { stream });
        }
      }
      for (const w of writes) session.writeInPlace(w.param, (dst, st) => w.write(dst, viewOf(full, p.shape), st));
      asm?.release(); // freed once the enqueued work that reads it is done
    }
  } finally {
    (staging as Tensor | null)?.release();
  }
  return list.length;
}

/** The write copies the whole source tensor, in order, to one contiguous region. */
function isWhole(w: DirectWrite): boolean {
  return !!w.range && w.range.start === 0 && w.range.len === w.range.view[w.range.dim];
}

export function syncMegatron(s: MegatronStrategy, out: ColocateOut): number {
  const { cfg } = s;
  const { engine, session, stream } = out;
  const tp = s.sizes.tp;
  // Expert parallel: this rank holds experts [epRank·El, (epRank+1)·El) under local indices;
  // local expert j of every ep rank arrives with one all-gather over the ep group.
  const ep = s.sizes.ep;
  const El = cfg.moe ? cfg.moe.numExperts / ep : 0;
  let epStaging: Tensor | null = null;
  const tpComm = s.mesh.comm('tp');
  const fast = engine.shard.tpSize === tp && engine.shard.tpRank === tpComm.rank;
  const local = s.localTensors('params');
  const specs = megatronSpecs(cfg);
  const maxN = Math.max(1, ...specs.filter((x) => x.tp !== 'replicated').map((x) => numel(x.shape)));
  let staging: Tensor | null = null, scratch: Tensor | null = null;
  let n = 0;
  try {
    for (const spec of specs) {
      const t = local.get(spec.name)!;
      n++;
      if (spec.expert !== undefined && ep > 1) {
        if (spec.expert >= El) continue; // covered by the gather of local index expert % El
        const fc = spec.name.endsWith('linear_fc1.weight') ? 'fc1' : 'fc2';
        const all = viewOf((epStaging ??= Tensor.empty(engine.device, [ep * t.numel], 'fp32')), [ep * t.numel]);
        out.pending.push(s.expertComm.allGather(t.reshape([t.numel]), all, stream));
        for (let q = 0; q < ep; q++) {
          const w = expertDirectWrite(cfg, engine.shard, spec.layer!, q * El + spec.expert, fc);
          const piece = viewOf(all, t.shape, q * t.numel);
          session.writeInPlace(w.param, (dst, st) => w.write(dst, piece, st));
        }
      } else if (spec.expert !== undefined) {
        const w = expertDirectWrite(cfg, engine.shard, spec.layer!, spec.expert, spec.name.endsWith('linear_fc1.weight') ? 'fc1' : 'fc2');
        session.writeInPlace(w.param, (dst, st) => w.write(dst, t, st));
      } else if (spec.tp === 'replicated') out.writeHf(hfNameOfReplicated(spec), t);
      else if (fast) writeLocalShard(cfg, spec.name, spec.layer!, t, out);
      else {
        staging ??= Tensor.empty(engine.device, [maxN], 'fp32');
        scratch ??= Tensor.empty(engine.device, [maxN], 'fp32');
        const all = viewOf(staging, [t.numel * tp]);
        out.pending.push(tpComm.allGather(t.reshape([t.numel]), all, stream));
        for (const [name, full] of hfFromShards(cfg, spec, all, tp, scratch, stream)) out.writeHf(name, full);
      }
    }
  } finally {
    staging?.release();
    scratch?.release();
    epStaging?.release();
  }
  return n;
}

/** Engine tp == trainer tp: a local Megatron TP shard is (a permutation of) the engine's local runtime tensor. */
function writeLocalShard(cfg: ModelConfig, name: string, layer: number, t: Tensor, out: ColocateOut): void {
  const p = `model.layers.${layer}`;
  const { engine, session } = out;
  const same = (param: string) => session.writeInPlace(param, (dst, st) => copy(dst.reshape([dst.numel]), t.reshape([t.numel]), { stream: st }));
  if (name.endsWith('linear_qkv.weight')) {
    const { hiddenSize: H, headDim: D, numHeads: nH, numKvHeads: nKV } = cfg;
    const g = nH / nKV;
    const groups = engine.shard.kvHeadsLocal;
    const grp = (g + 2) * D * H;
    const hl = groups * g * D * H, kvl = groups * D * H;
    session.writeInPlace(`${p}.self_attn.qkv_proj.weight`, (dst, st) => {
      const flat = dst.reshape([dst.numel]);
      const src = t.reshape([t.numel]);
      stridedRead(viewOf(flat, [hl], 0), src, [groups, g * D * H], [grp, 1], 0, st);
      stridedRead(viewOf(flat, [kvl], hl), src, [groups, D * H], [grp, 1], g * D * H, st);
      stridedRead(viewOf(flat, [kvl], hl + kvl), src, [groups, D * H], [grp, 1], (g + 1) * D * H, st);
    });
  } else if (name.endsWith('linear_proj.weight')) same(`${p}.self_attn.o_proj.weight`);
  else if (name.endsWith('mlp.linear_fc1.weight')) same(`${p}.mlp.gate_up_proj.weight`);
  else if (name.endsWith('mlp.linear_fc2.weight')) same(`${p}.mlp.down_proj.weight`);
  else throw new InternalError(`colocate sync: no local mapping for ${name}`);
}

/** PEFT adapter parameter names (`….lora_A.weight`, `….lora_B`). */
export function isLoraName(name: string): boolean {
  return /\.lora_[AB](\.|$)/.test(name);
}
