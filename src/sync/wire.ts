/**
 * What a weight sync moves each source as: the dtype the engine holds its HF tensors in
 * (rollout/weight-dtype.ts). For a 'bfloat16' engine the trainer's fp32 matmul weights are
 * cast to bf16 on the trainer side before any transfer, so the collectives move half the
 * bytes and the engine stores what it receives as is; everything else goes as fp32.
 */
import { cast, type Stream, type Tensor } from '../runtime/device/device-index.js';
import { dtypeSize, type DType } from '../runtime/device/dtype.js';
import type { ModelConfig } from '../model/config.js';
import { paramSpecs } from '../model/params.js';
import { hfNames, type SourceDescriptor } from '../parallel/weight-sources.js';
import { hfDtypeOf, type EngineDtype } from '../rollout/weight-dtype.js';

/** The dtype source `s` travels as to an engine of precision `dtype`: bf16 only when every HF tensor it maps to is held in bf16. */
export function wireDtype(cfg: ModelConfig, s: SourceDescriptor, dtype: EngineDtype): DType {
  if (dtype === 'float32') return 'fp32';
  return hfNames(s).every((hf) => hfDtypeOf(cfg, hf, dtype) === 'bf16') ? 'bf16' : 'fp32';
}

/** The local piece in `wire`: itself, or a cast the caller releases (once the transfers reading it are enqueued). */
export function onWire(local: Tensor, wire: DType, stream: Stream): Tensor {
  return local.dtype === wire ? local : cast(local, wire, { stream });
}

/** Bytes of every HF tensor of `cfg` as a sync to an engine of precision `dtype` moves them (fp32: 4 per element). */
export function wireBytes(cfg: ModelConfig, dtype: EngineDtype): number {
  const size = (name: string) => (dtype === 'float32' || /\.lora_[AB](\.|$)/.test(name) ? 4 : dtypeSize(hfDtypeOf(cfg, name, dtype)));
  return paramSpecs(cfg, { expertLayout: 'fused' }).reduce((a, s) => a + s.shape.reduce((x, y) => x * y, 1) * size(s.name), 0);
}
