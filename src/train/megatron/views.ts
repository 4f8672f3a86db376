/**
 * Views into one contiguous device buffer: a flat buffer cut into consecutive
 * tensors (bucketed gradients, the fused local experts seen per expert). A view
 * shares its buffer, so only the owner of the flat tensor may release it.
 */
import { Tensor } from '../../runtime/device/device-index.js';
import { dtypeSize } from '../../runtime/device/dtype.js';

/** The tensor of `shape` starting `elemOffset` elements into contiguous `base`. */
export function viewOf(base: Tensor, elemOffset: number, shape: readonly number[]): Tensor {
  return new Tensor(base.device, base.buffer, base.dtype, shape, undefined, base.byteOffset + elemOffset * dtypeSize(base.dtype));
}

/** Cuts `flat` into consecutive views of `shapes` (their numels must sum to flat.numel). */
export function splitViews(flat: Tensor, shapes: readonly (readonly number[])[]): Tensor[] {
  let o = 0;
  return shapes.map((s) => {
    const v = viewOf(flat, o, s);
    o += v.numel;
    return v;
  });
}
