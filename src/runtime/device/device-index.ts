/** Public API of the device layer, re-exported by src/index.ts. */
export { Device, configureDevice, importBuffer, DeviceBuffer, type DeviceStats, type ConfigureDeviceOptions } from './device.js';
export { Stream, type SynchronizeOptions, type PendingOp, type StreamStats } from './stream.js';
export { Event } from './event.js';
export { Tensor, type TensorHandle, type HostArray, type HostData } from './tensor.js';
export { DTYPES, dtypeSize, isFloatDType, type DType } from './dtype.js';
export {
  fill,
  arange,
  cast,
  add,
  mul,
  scale,
  scaleElementsInPlace,
  axpy,
  permute,
  transpose,
  matmul,
  copy,
  copyPeer,
  type OpOptions,
  type KernelImpl,
  type ArangeOptions,
  type MatmulOptions,
} from './ops.js';
export { loadNative } from '../native.js';
