/**
 * The trainer side of a colocated full sync, one function per strategy, all on device:
 * each turns what the rank owns into the engine's processed runtime layout through
 * `out` (direct writes; no post-load processing). Everything is enqueued on `stream`
 * (the engine's stream), so buffers are reused in stream order without host waits.
 *
 * - single: every HF tensor of the store, written directly.
 * - fsdp2: flat shards all-gathered bucket by bucket. A bucket holds `per` bytes of
 *   every rank (planBuckets over the parameters' padded chunks, per = bucketBytes / dp),
 *   so the gathered staging is one bucket; a strided read puts each parameter that fits
 *   whole into the second bucket-sized buffer as its padded full tensor (param-major),
 *   which is written to the engine. A parameter split over buckets (larger than a
 *   bucket) is assembled in a buffer of its own size, freed once written.
 * - megatron (ep = 1): with engine tp == trainer tp and the same tp rank, TP shards go
 *   straight to the engine's shards (qkv de-interleaved per query group, fc1 = gate ‖ up
 *   already); otherwise each TP-split tensor is all-gathered over tp and re-cut.
 */
import { copy, Tensor, type Stream } from '../runtime/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import { stridedRead, viewOf } from '../parallel/local-ops.js';
import type { ModelConfig } from '../model/config.js';
import { paramSpecs } from '../model/params.js';
import type { RolloutEngine } from '../rollout/engine.js';
import { expertDirectWrite } from '../rollout/direct-write.js';
import type { Fsdp2Strategy } from '../train/fsdp2/strategy.js';
import type { FlatParam } from '../train/fsdp2/layout.js';
import type { MegatronStrategy } from '../train/megatron/strategy.js';
import { megatronSpecs } from '../train/megatron/bridge.js';
import type { SingleDeviceStrategy } from '../train/single.js';
import { planBuckets } from './buckets.js';
import { hfFromShards, hfNameOfReplicated } from './megatron-hf.js';

export interface ColocateOut {
  engine: RolloutEngine;
  stream: Stream;
  bucketBytes: number;
  /** Writes the full HF tensor `name` into the engine (direct, processed layout). */
  writeHf(name: string, full: Tensor): void;
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
  const per = Math.floor(out.bucketBytes / dp / 64) * 64;
  if (per < 64) {
    throw new InvalidArgumentError(`Weight sync: a bucket of ${out.bucketBytes} bytes over ${dp} fsdp2 ranks leaves less than 64 bytes per rank. HINT: use bucketBytes >= ${64 * dp}.`, { bucketBytes: out.bucketBytes });
  }
  const byName = new Map<string, { p: FlatParam; shard: Tensor }>();
  const shards = s.localShards();
  // LoRA adapters are not engine weights (an adapter sync sends them); the base goes in full.
  for (const u of plan.units) for (const p of u.params) if (!isLoraName(p.name)) byName.set(p.name, { p, shard: shards.get(u.key)!.param });
  const buckets = planBuckets([...byName.values()].map(({ p }) => ({ name: p.name, bytes: p.chunk * 4 })), per, { keepWhole: true });
  const { stream, engine } = out;
  const maxFull = Math.max(...[...byName.values()].map(({ p }) => dp * p.chunk));
  // Staging sized to the largest bucket actually planned (a small model never takes a whole bucket).
  const used = Math.max(64, ...buckets.map((b) => Math.ceil(b.bytes / 64) * 64));
  const staging = Tensor.empty(engine.device, [(dp * used) / 4], 'fp32');
  const values = Tensor.empty(engine.device, [(dp * used) / 4], 'fp32');
  const asm = new Map<string, Tensor>();
  try {
    for (const b of buckets) {
      const c = b.bytes / 4; // elements each rank contributes to this bucket
      for (const seg of b.segments) {
        const { p, shard } = byName.get(seg.name)!;
        if (seg.bytes) copy(viewOf(staging, [seg.bytes / 4], comm.rank * c + seg.bucketOffset / 4), viewOf(shard, [seg.bytes / 4], p.offset + seg.tensorOffset / 4), { stream });
      }
      out.pending.push(comm.allGather(viewOf(staging, [c], comm.rank * c), viewOf(staging, [dp * c]), stream));
      let at = 0;
      for (const seg of b.segments) {
        const { p } = byName.get(seg.name)!;
        if (seg.tensorOffset === 0 && seg.last) {
          // Padded full tensor = chunk of every rank: a [dp, chunk] read with row stride c.
          stridedRead(viewOf(values, [dp * p.chunk], at), staging, [dp, p.chunk], [c, 1], seg.bucketOffset / 4, stream);
          out.writeHf(p.name, viewOf(values, p.shape, at));
          at += dp * p.chunk;
          continue;
        }
        // Segments come in order, so at most one split parameter is open at a time: one
        // assembly buffer (the largest padded full tensor) is reused in stream order.
        let a = asm.get('');
        if (!a) asm.set('', (a = Tensor.empty(engine.device, [maxFull], 'fp32')));
        const n = seg.bytes / 4;
        for (let q = 0; q < dp && n; q++) copy(viewOf(a, [n], q * p.chunk + seg.tensorOffset / 4), viewOf(staging, [n], q * c + seg.bucketOffset / 4), { stream });
        if (seg.last) {
          out.writeHf(p.name, viewOf(a, p.shape));
        }
      }
    }
  } finally {
    staging.release();
    values.release();
    for (const a of asm.values()) a.release();
  }
  return byName.size;
}

export function syncMegatron(s: MegatronStrategy, out: ColocateOut): number {
  const { cfg } = s;
  const { engine, stream } = out;
  if (s.sizes.ep > 1) {
    throw new InvalidArgumentError(`Weight sync (colocate): megatron with ep=${s.sizes.ep} is not supported yet (experts would need a gather over ep). HINT: use ep=1 for colocated sync, or server mode.`, { ep: s.sizes.ep });
  }
  const tp = s.sizes.tp;
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
      if (spec.expert !== undefined) {
        const w = expertDirectWrite(cfg, engine.shard, spec.layer!, spec.expert, spec.name.endsWith('linear_fc1.weight') ? 'fc1' : 'fc2');
        engine.writeRuntimeDirect(w.param, (dst, st) => w.write(dst, t, st));
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
  }
  return n;
}

/** Engine tp == trainer tp: a local Megatron TP shard is (a permutation of) the engine's local runtime tensor. */
function writeLocalShard(cfg: ModelConfig, name: string, layer: number, t: Tensor, out: ColocateOut): void {
  const p = `model.layers.${layer}`;
  const { engine } = out;
  const same = (param: string) => engine.writeRuntimeDirect(param, (dst, st) => copy(dst.reshape([dst.numel]), t.reshape([t.numel]), { stream: st }));
  if (name.endsWith('linear_qkv.weight')) {
    const { hiddenSize: H, headDim: D, numHeads: nH, numKvHeads: nKV } = cfg;
    const g = nH / nKV;
    const groups = engine.shard.kvHeadsLocal;
    const grp = (g + 2) * D * H;
    const hl = groups * g * D * H, kvl = groups * D * H;
    engine.writeRuntimeDirect(`${p}.self_attn.qkv_proj.weight`, (dst, st) => {
      const flat = dst.reshape([dst.numel]);
      const src = t.reshape([t.numel]);
      stridedRead(viewOf(flat, [hl], 0), src, [groups, g * D * H], [grp, 1], 0, st);
      stridedRead(viewOf(flat, [kvl], hl), src, [groups, D * H], [grp, 1], g * D * H, st);
      stridedRead(viewOf(flat, [kvl], hl + kvl), src, [groups, D * H], [grp, 1], (g + 1) * D * H, st);
    });
  } else if (name.endsWith('linear_proj.weight')) same(`${p}.self_attn.o_proj.weight`);
  else if (name.endsWith('mlp.linear_fc1.weight')) same(`${p}.mlp.gate_up_proj.weight`);
  else if (name.endsWith('mlp.linear_fc2.weight')) same(`${p}.mlp.down_proj.weight`);
  else throw new Error(`colocate sync: no local mapping for ${name}`);
}

/** PEFT adapter parameter names (`….lora_A.weight`, `….lora_B`). */
export function isLoraName(name: string): boolean {
  return /\.lora_[AB](\.|$)/.test(name);
}
