/**
 * Public API of the model kernels: forward and backward of every numeric op of the
 * Qwen3-style dense / MoE model. Each takes { stream?, impl?: 'fast' | 'reference' }
 * and enqueues one native op; none reads device data on the host.
 */
export { type KernelImpl, type KernelOptions } from './common.js';
export { embedding, embeddingBackward } from './embedding.js';
export { rmsNorm, rmsNormBackward, type RmsNormResult, type RmsNormGrads } from './rmsnorm.js';
export { rope, ropeBackward, type RopeTable } from './rope.js';
export { qkvNormRope, addRmsNorm, type QkvNormRopeOptions, type QkvNormRopeResult, type AddRmsNormResult } from './fused-norm.js';
export { attention, attentionBackward, attentionDecode, type AttentionResult, type AttentionGrads } from './attention.js';
export { kvCacheWrite } from './kv-write.js';
export { swiglu, swigluBackward, swigluFused, swigluFusedBackward, type SwigluGrads } from './swiglu.js';
export { routerTopK, routerBackward, type RouterResult } from './router.js';
export {
  moeDispatch,
  moeGather,
  moeGatherBackward,
  moeCombine,
  moeCombineBackward,
  groupedMatmul,
  groupedMatmulBackward,
  type MoeDispatchResult,
  type MoeCombineGrads,
  type GroupedMatmulOptions,
  type GroupedMatmulBackwardOptions,
  type GroupedMatmulGrads,
} from './moe.js';
export {
  logSoftmax,
  crossEntropy,
  crossEntropyBackward,
  tokenLogprobs,
  tokenLogprobsWithLse,
  tokenLogprobsBackward,
  IGNORE_INDEX,
  type CrossEntropyOptions,
  type CrossEntropyResult,
  type TokenLogprobsResult,
} from './loss.js';
export { tokenLogprobsEntropy, tokenLogprobsEntropyBackward, type LogprobsEntropyResult } from './entropy.js';
export { adamw, adamwMulti, type AdamWOptions, type AdamWEntry } from './adamw.js';
export { sumSquares } from './sum-squares.js';
export { sample, philox4x32, type SampleOptions } from './sampling.js';
export {
  gatedDeltaRule,
  gatedDeltaRuleBackward,
  causalConv1d,
  causalConv1dBackward,
  gatedRmsNorm,
  gatedRmsNormBackward,
  gdnGating,
  gdnGatingBackward,
  gdnBackendImpl,
  type GatedDeltaRuleOptions,
  type GatedDeltaRuleResult,
  type GatedDeltaRuleGrads,
  type CausalConvOptions,
} from './gdn.js';
export { decodeLayer, type DecodeLayerWeights, type DecodeLayerResult } from './decode-layer.js';
