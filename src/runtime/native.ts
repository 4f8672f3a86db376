/**
 * Loads the native addon (build/Release/ascent_native.node) and holds the typings
 * of everything it exports, in one place mirroring native/addon.cc, the Stream /
 * Event classes and the buffer handles (native/device/*.h) and the enqueue entry points
 * (native/ops.cc). Arguments cross the boundary as plain numbers and native
 * handles; TS validates them first (ops.ts), native re-checks as a safety net.
 *
 * The addon is context-aware: it may be loaded in the main thread and in every
 * worker; each env installs its own error factory and completion callback here.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AscentError, errorFromCode, type ErrorDetails, InternalError } from './errors.js';

/**
 * The opaque native handle of a device buffer (an External naming a slot of the env's
 * buffer table, native/device/buffer_table.h). Only alloc / importBuffer make one; JS cannot.
 */
export type NativeBufferHandle = { readonly __nativeBufferHandle: unique symbol };

/**
 * The property a device buffer keeps its handle under. A symbol, so no plain object
 * ({ id, size }) passes for a buffer; native ops read it (initBuffers hands it over).
 */
export const BUFFER_HANDLE: unique symbol = Symbol('ascent.bufferHandle');

/**
 * [id, device, size] of the buffer alloc / importBuffer just made: written natively, read by
 * the JS constructor, so making a buffer is one native call returning one value. Over an
 * ArrayBuffer so its memory never moves (native keeps a pointer to it).
 */
export const BUFFER_INFO = new Float64Array(new ArrayBuffer(3 * 8));

/**
 * A buffer argument of the base stream ops: the buffer, or its handle itself (the TS ops pass the
 * handle, which native reads without a property lookup; direct callers may pass either).
 */
export type NativeBufferArg = NativeBuffer | NativeBufferHandle;

/** A block of device memory as native ops take it (src/runtime/device/buffer.ts). */
export interface NativeBuffer {
  readonly [BUFFER_HANDLE]: NativeBufferHandle;
  /** Process-unique; importable from any thread. */
  readonly id: number;
  readonly device: number;
  /** Bytes requested (the pool block is rounded up to 64). */
  readonly size: number;
  readonly released: boolean;
  /** Drops this wrapper's reference; pending ops keep the memory alive until they ran. */
  release(): void;
}

export interface NativeEvent {
  readonly id: number;
  readonly device: number;
  /** Number of times the event was recorded. */
  readonly recorded: number;
  query(): boolean;
  elapsedTime(end: NativeEvent): number;
}

export interface NativePendingOp {
  seq: number;
  op: string;
  state: 'queued' | 'running';
  runningMs: number;
}

export interface NativeStreamStats {
  enqueued: number;
  completed: number;
  /** Ops that ran inline on the enqueueing thread because the stream was idle (small kernels and copies). */
  inlined: number;
  /** Runs of held-back completions the stream thread posted together (back-to-back collectives: one wake-up per run). */
  batched: number;
  destroyed: boolean;
  error: AscentError | null;
}

/** Impl codes: 0 = fast, 1 = reference. Tokens: 0 = no completion wanted. Every enqueue returns the op's seq. */
export interface NativeStream {
  readonly id: number;
  readonly device: number;
  pending(): NativePendingOp[];
  stats(): NativeStreamStats;
  destroy(): void;
  /** Records every op this stream runs from now on (false: stops). */
  profile(on: boolean): void;
  /** The ops run since the last drain (steady-clock µs, the clock of Stream.nowUs()). */
  drainProfile(): {
    seq: Float64Array;
    start: Float64Array;
    end: Float64Array;
    names: string[];
    /** Extra trace args of op i (e.g. copyRanges' range count and bytes), or undefined. */
    args: Array<Record<string, number> | undefined>;
    dropped: number;
  };
  marker(token: number): number;
  sleep(ms: number, token: number): number;
  fail(message: string, token: number): number;
  recordEvent(event: NativeEvent, token: number): number;
  waitEvent(event: NativeEvent, token: number): number;
  copyH2D(dst: NativeBufferArg, dstOffset: number, src: ArrayBufferView | ArrayBuffer, token: number): number;
  copyD2H(src: NativeBufferArg, srcOffset: number, nbytes: number, token: number): number;
  copyD2D(dst: NativeBufferArg, dstOffset: number, src: NativeBufferArg, srcOffset: number, nbytes: number, token: number): number;
  /**
   * One op for many copies: `ranges` holds (dstBuffer, dstByteOffset, srcBuffer, srcByteOffset, nbytes)
   * per range, buffers as indices into `buffers`; run in order, each a memcpy (native/copy_ranges_op.cc).
   */
  copyRanges(buffers: NativeBuffer[], ranges: Float64Array, token: number): number;
  copyPeer(dst: NativeBufferArg, dstOffset: number, src: NativeBufferArg, srcOffset: number, nbytes: number, token: number): number;
  fill(dst: NativeBufferArg, dstOffset: number, count: number, dtype: number, value: number, impl: number, token: number): number;
  arange(dst: NativeBufferArg, dstOffset: number, count: number, dtype: number, start: number, step: number, impl: number, token: number): number;
  cast(
    dst: NativeBufferArg,
    dstOffset: number,
    dstDtype: number,
    src: NativeBufferArg,
    srcOffset: number,
    srcDtype: number,
    count: number,
    impl: number,
    token: number,
  ): number;
  /** op: 0 = add, 1 = mul. */
  binary(
    op: number,
    dtype: number,
    out: NativeBufferArg,
    outOffset: number,
    a: NativeBufferArg,
    aOffset: number,
    b: NativeBufferArg,
    bOffset: number,
    count: number,
    impl: number,
    token: number,
  ): number;
  scale(
    dtype: number,
    out: NativeBufferArg,
    outOffset: number,
    x: NativeBufferArg,
    xOffset: number,
    count: number,
    alpha: number,
    impl: number,
    token: number,
  ): number;
  axpy(
    dtype: number,
    y: NativeBufferArg,
    yOffset: number,
    x: NativeBufferArg,
    xOffset: number,
    count: number,
    alpha: number,
    impl: number,
    token: number,
  ): number;
  permute(
    elemSize: number,
    dst: NativeBufferArg,
    dstOffset: number,
    src: NativeBufferArg,
    srcOffset: number,
    shape: number[],
    srcStrides: number[],
    impl: number,
    token: number,
  ): number;
  /**
   * With c = null the op makes C itself (a new block on the stream's device, as alloc() makes one:
   * BUFFER_INFO holds its id, device and size) and returns its handle instead of the seq.
   */
  matmul(
    inDtype: number,
    outDtype: number,
    a: NativeBufferArg,
    aOffset: number,
    b: NativeBufferArg,
    bOffset: number,
    c: null,
    cOffset: number,
    batch: number,
    m: number,
    n: number,
    k: number,
    transA: boolean,
    transB: boolean,
    impl: number,
    token: number,
  ): NativeBufferHandle;
  matmul(
    inDtype: number,
    outDtype: number,
    a: NativeBufferArg,
    aOffset: number,
    b: NativeBufferArg,
    bOffset: number,
    c: NativeBufferArg,
    cOffset: number,
    batch: number,
    m: number,
    n: number,
    k: number,
    transA: boolean,
    transB: boolean,
    impl: number,
    token: number,
  ): number;
  /** out[0] (int64, mod 2^64) += fingerprint of an fp32 affine view (src/sync/fingerprint.ts). */
  fingerprint(
    src: NativeBuffer,
    srcOffset: number,
    shape: number[],
    localStrides: number[],
    globalStrides: number[],
    globalOffset: number,
    limit: number,
    period: number,
    start: number,
    len: number,
    out: NativeBuffer,
    outOffset: number,
    token: number,
  ): number;
}

export interface NativeDeviceStats {
  allocated: number;
  peak: number;
  capacity: number;
  hostSyncs: number;
  largestFreeBlock: number;
  /** Live allocations. */
  numAllocs: number;
  /** Allocations ever made. */
  totalAllocs: number;
  /** Free bytes the pool keeps resident for reuse, within the device's high-water mark; emptyCache() returns them to the OS. */
  cached: number;
}

// ---- communicators (native/comm/communicator.cc; owned by the comm layer, src/runtime/comm/comm.ts) ----

/**
 * One rank's communicator. Counts are per rank (NCCL convention), offsets in
 * bytes, dtype codes from DTYPE_CODE, reduce op codes 0 sum, 1 prod, 2 max, 3 min,
 * 4 avg. Every enqueue returns the stream op's seq; `token` completes when the op
 * ran (with the op's own error class on failure).
 */
export interface NativeCommunicator {
  readonly rank: number;
  /** 0 for the result of split() with color -1. */
  readonly size: number;
  readonly device: number;
  /** 32 hex digits; '' before init. */
  readonly id: string;
  readonly aborted: boolean;
  readonly destroyed: boolean;
  abortCause(): Error | null;
  allReduce(
    send: NativeBuffer,
    sendOffset: number,
    recv: NativeBuffer,
    recvOffset: number,
    count: number,
    dtype: number,
    op: number,
    stream: NativeStream,
    token: number,
  ): number;
  broadcast(
    send: NativeBuffer,
    sendOffset: number,
    recv: NativeBuffer,
    recvOffset: number,
    count: number,
    dtype: number,
    root: number,
    stream: NativeStream,
    token: number,
  ): number;
  allGather(
    send: NativeBuffer,
    sendOffset: number,
    recv: NativeBuffer,
    recvOffset: number,
    count: number,
    dtype: number,
    stream: NativeStream,
    token: number,
  ): number;
  reduceScatter(
    send: NativeBuffer,
    sendOffset: number,
    recv: NativeBuffer,
    recvOffset: number,
    count: number,
    dtype: number,
    op: number,
    stream: NativeStream,
    token: number,
  ): number;
  allToAll(
    send: NativeBuffer,
    sendOffset: number,
    recv: NativeBuffer,
    recvOffset: number,
    count: number,
    dtype: number,
    stream: NativeStream,
    token: number,
  ): number;
  allToAllV(
    send: NativeBuffer,
    sendOffset: number,
    sendCounts: number[],
    sendDispls: number[],
    recv: NativeBuffer,
    recvOffset: number,
    recvCounts: number[],
    recvDispls: number[],
    dtype: number,
    stream: NativeStream,
    token: number,
  ): number;
  barrier(stream: NativeStream, token: number): number;
  /** Inside a group returns 0 and enqueues nothing (groupEnd enqueues the group). */
  send(buf: NativeBuffer, offset: number, count: number, dtype: number, peer: number, stream: NativeStream, token: number): number;
  recv(buf: NativeBuffer, offset: number, count: number, dtype: number, peer: number, stream: NativeStream, token: number): number;
  groupStart(): void;
  /** 0 when nothing was enqueued (nested, or empty group): the token is then unused. */
  groupEnd(token: number): number;
  /** The child is usable once `token` completed; size 0 when color is -1. */
  split(color: number, key: number, connectTimeoutMs: number, execTimeoutMs: number, traceDir: string, token: number): NativeCommunicator;
  abort(reason: string): void;
  destroy(): void;
  /** Flight-recorder JSON of every rank (format: native/comm/dump.cc). */
  flightRecord(): string;
}

export interface NativeCommBinding {
  readonly Communicator: new () => NativeCommunicator;
  commUniqueId(): string;
  /** The communicator is usable once `token` completed (all ranks joined). */
  commInitRank(
    uniqueId: string,
    nranks: number,
    rank: number,
    device: number,
    connectTimeoutMs: number,
    execTimeoutMs: number,
    traceDir: string,
    token: number,
  ): NativeCommunicator;
  commAbortById(id: string, reason: string): boolean;
}

// ---- end of communicators ----

// ---- model kernels (native/model_ops.cc; owned by src/model/kernels/) ----

type B = NativeBufferArg;
/**
 * Arguments of stream.modelOp(name, ...args, impl, token) per kernel, in the order
 * native/model_ops.cc reads them: dims and scalars first, then each tensor as
 * (buffer, byteOffset). The kernels in src/model/kernels pass buffer[BUFFER_HANDLE], which native reads
 * without the property lookup a buffer object costs. dtype codes from DTYPE_CODE; every tensor is contiguous.
 */
export interface NativeModelOps {
  embedding: [dtype: number, T: number, V: number, H: number, ids: B, idsOff: number, table: B, tableOff: number, out: B, outOff: number];
  embeddingBackward: [T: number, V: number, H: number, ids: B, idsOff: number, dy: B, dyOff: number, dtable: B, dtableOff: number];
  rmsNorm: [T: number, H: number, eps: number, x: B, xOff: number, w: B, wOff: number, y: B, yOff: number, rstd: B, rstdOff: number];
  rmsNormBackward: [
    T: number,
    H: number,
    dy: B,
    dyOff: number,
    x: B,
    xOff: number,
    w: B,
    wOff: number,
    rstd: B,
    rstdOff: number,
    dx: B,
    dxOff: number,
    dw: B,
    dwOff: number,
  ];
  rope: [
    T: number,
    heads: number,
    D: number,
    invFreq: Float64Array,
    scale: number,
    inverse: boolean,
    x: B,
    xOff: number,
    positions: B,
    posOff: number,
    y: B,
    yOff: number,
  ];
  qkvNormRope: [
    T: number,
    nH: number,
    nKV: number,
    D: number,
    eps: number,
    invFreq: Float64Array,
    scale: number,
    qkv: B,
    qkvOff: number,
    qw: B,
    qwOff: number,
    kw: B,
    kwOff: number,
    positions: B,
    posOff: number,
    q: B,
    qOff: number,
    k: B,
    kOff: number,
    v: B,
    vOff: number,
    cacheB: number,
    Smax: number,
    kCache: B | null,
    kCacheOff: number,
    vCache: B | null,
    vCacheOff: number,
    cachePos: B | null,
    cachePosOff: number,
  ];
  addRmsNorm: [T: number, H: number, eps: number, x: B, xOff: number, d: B, dOff: number, w: B, wOff: number, sum: B, sumOff: number, y: B, yOff: number];
  decodeLayer: [
    B: number,
    H: number,
    nH: number,
    nKV: number,
    D: number,
    I: number,
    Smax: number,
    eps: number,
    invFreq: Float64Array,
    scale: number,
    x: B,
    xOff: number,
    h: B,
    hOff: number,
    wqkv: B,
    wqkvOff: number,
    qn: B,
    qnOff: number,
    kn: B,
    knOff: number,
    wo: B,
    woOff: number,
    postLn: B,
    postLnOff: number,
    wgu: B,
    wguOff: number,
    wdown: B,
    wdownOff: number,
    nextLn: B,
    nextLnOff: number,
    positions: B,
    posOff: number,
    lengths: B,
    lengthsOff: number,
    kCache: B,
    kCacheOff: number,
    vCache: B,
    vCacheOff: number,
    xOut: B,
    xOutOff: number,
    hOut: B,
    hOutOff: number,
  ];
  attention: [
    B: number,
    S: number,
    nH: number,
    nKV: number,
    D: number,
    q: B,
    qOff: number,
    k: B,
    kOff: number,
    v: B,
    vOff: number,
    o: B,
    oOff: number,
    lse: B,
    lseOff: number,
  ];
  attentionBackward: [
    B: number,
    S: number,
    nH: number,
    nKV: number,
    D: number,
    dout: B,
    doutOff: number,
    q: B,
    qOff: number,
    k: B,
    kOff: number,
    v: B,
    vOff: number,
    o: B,
    oOff: number,
    lse: B,
    lseOff: number,
    dq: B,
    dqOff: number,
    dk: B,
    dkOff: number,
    dv: B,
    dvOff: number,
  ];
  attentionDecode: [
    B: number,
    Smax: number,
    nH: number,
    nKV: number,
    D: number,
    q: B,
    qOff: number,
    kCache: B,
    kOff: number,
    vCache: B,
    vOff: number,
    lengths: B,
    lenOff: number,
    o: B,
    oOff: number,
  ];
  kvCacheWrite: [
    B: number,
    count: number,
    Smax: number,
    row: number,
    k: B,
    kOff: number,
    v: B,
    vOff: number,
    positions: B,
    posOff: number,
    kCache: B,
    kCacheOff: number,
    vCache: B,
    vCacheOff: number,
  ];
  swiglu: [N: number, I: number, gStride: number, uStride: number, g: B, gOff: number, u: B, uOff: number, h: B, hOff: number];
  swigluBackward: [
    N: number,
    I: number,
    gStride: number,
    uStride: number,
    dh: B,
    dhOff: number,
    g: B,
    gOff: number,
    u: B,
    uOff: number,
    dg: B,
    dgOff: number,
    du: B,
    duOff: number,
  ];
  router: [
    T: number,
    E: number,
    k: number,
    renorm: boolean,
    logits: B,
    zOff: number,
    probs: B,
    pOff: number,
    weights: B,
    wOff: number,
    indices: B,
    iOff: number,
  ];
  routerBackward: [
    T: number,
    E: number,
    k: number,
    renorm: boolean,
    dWeights: B,
    dwOff: number,
    probs: B,
    pOff: number,
    indices: B,
    iOff: number,
    dLogits: B,
    dzOff: number,
  ];
  moeDispatch: [slots: number, E: number, indices: B, iOff: number, counts: B, cOff: number, offsets: B, oOff: number, order: B, ordOff: number];
  moeGather: [T: number, k: number, H: number, x: B, xOff: number, order: B, ordOff: number, xs: B, xsOff: number];
  moeGatherBackward: [T: number, k: number, H: number, dXs: B, dxsOff: number, order: B, ordOff: number, dX: B, dxOff: number];
  moeCombine: [T: number, k: number, H: number, ys: B, ysOff: number, order: B, ordOff: number, weights: B, wOff: number, y: B, yOff: number];
  moeCombineBackward: [
    T: number,
    k: number,
    H: number,
    dY: B,
    dyOff: number,
    ys: B,
    ysOff: number,
    order: B,
    ordOff: number,
    weights: B,
    wOff: number,
    dYs: B,
    dysOff: number,
    dWeights: B,
    dwOff: number,
  ];
  groupedMatmul: [
    inDtype: number,
    outDtype: number,
    N: number,
    K: number,
    M: number,
    E: number,
    transB: boolean,
    x: B,
    xOff: number,
    w: B,
    wOff: number,
    offsets: B,
    oOff: number,
    y: B,
    yOff: number,
  ];
  /** dX / dW may be null (not wanted). */
  groupedMatmulBackward: [
    inDtype: number,
    N: number,
    K: number,
    M: number,
    E: number,
    transB: boolean,
    dY: B,
    dyOff: number,
    x: B,
    xOff: number,
    w: B,
    wOff: number,
    offsets: B,
    oOff: number,
    dX: B | null,
    dxOff: number,
    dW: B | null,
    dwOff: number,
  ];
  logSoftmax: [T: number, V: number, logits: B, zOff: number, out: B, outOff: number];
  /** mode 0: loss = lse - z[target]; 1: logprob = z[target] - lse; z = scale * logits (scale = 1 / temperature). */
  crossEntropy: [
    mode: number,
    T: number,
    V: number,
    ignoreIndex: number,
    scale: number,
    logits: B,
    zOff: number,
    targets: B,
    tOff: number,
    loss: B,
    lossOff: number,
    lse: B,
    lseOff: number,
  ];
  crossEntropyBackward: [
    T: number,
    V: number,
    ignoreIndex: number,
    scale: number,
    dLoss: B,
    dlOff: number,
    logits: B,
    zOff: number,
    targets: B,
    tOff: number,
    lse: B,
    lseOff: number,
    dLogits: B,
    dzOff: number,
  ];
  /** out [2T] = log p(target) ‖ exact entropy H of softmax(scale * logits) per token (0 on ignored rows). */
  tokenLogprobsEntropy: [
    T: number,
    V: number,
    ignoreIndex: number,
    scale: number,
    logits: B,
    zOff: number,
    targets: B,
    tOff: number,
    out: B,
    outOff: number,
    lse: B,
    lseOff: number,
  ];
  tokenLogprobsEntropyBackward: [
    T: number,
    V: number,
    ignoreIndex: number,
    scale: number,
    dOut: B,
    doOff: number,
    logits: B,
    zOff: number,
    targets: B,
    tOff: number,
    lse: B,
    lseOff: number,
    out: B,
    outOff: number,
    dLogits: B,
    dzOff: number,
  ];
  adamw: [
    n: number,
    lr: number,
    beta1: number,
    beta2: number,
    eps: number,
    weightDecay: number,
    step: number,
    param: B,
    pOff: number,
    grad: B,
    gOff: number,
    m: B,
    mOff: number,
    v: B,
    vOff: number,
  ];
  /** adamw over a list (native/model_ops_multi.inc): then `count` x (n, param, pOff, grad, gOff, m, mOff, v, vOff). */
  adamwMulti: [count: number, lr: number, beta1: number, beta2: number, eps: number, weightDecay: number, step: number, ...entries: Array<number | B>];
  /** Σ x² over a list into out [1]: then `count` x (n, x, xOff). */
  sumSquares: [count: number, out: B, outOff: number, ...entries: Array<number | B>];
  /** Gated DeltaNet (native/kernels/model/gdn.h); null tensors are absent optionals. chunk 0 = recurrent. */
  gdn: [
    B: number,
    T: number,
    Hk: number,
    Hv: number,
    Dk: number,
    Dv: number,
    chunk: number,
    l2norm: boolean,
    q: B,
    qOff: number,
    k: B,
    kOff: number,
    v: B,
    vOff: number,
    g: B,
    gOff: number,
    beta: B,
    bOff: number,
    mask: B | null,
    mOff: number,
    h0: B | null,
    h0Off: number,
    o: B,
    oOff: number,
    ht: B | null,
    htOff: number,
  ];
  gdnBackward: [
    B: number,
    T: number,
    Hk: number,
    Hv: number,
    Dk: number,
    Dv: number,
    l2norm: boolean,
    q: B,
    qOff: number,
    k: B,
    kOff: number,
    v: B,
    vOff: number,
    g: B,
    gOff: number,
    beta: B,
    bOff: number,
    mask: B | null,
    mOff: number,
    h0: B | null,
    h0Off: number,
    dO: B,
    doOff: number,
    dht: B | null,
    dhtOff: number,
    dq: B,
    dqOff: number,
    dk: B,
    dkOff: number,
    dv: B,
    dvOff: number,
    dg: B,
    dgOff: number,
    dbeta: B,
    dbOff: number,
    dh0: B | null,
    dh0Off: number,
  ];
  causalConv: [
    B: number,
    T: number,
    C: number,
    K: number,
    silu: boolean,
    x: B,
    xOff: number,
    w: B,
    wOff: number,
    s0: B | null,
    s0Off: number,
    y: B,
    yOff: number,
    st: B | null,
    stOff: number,
  ];
  causalConvBackward: [
    B: number,
    T: number,
    C: number,
    K: number,
    silu: boolean,
    dy: B,
    dyOff: number,
    x: B,
    xOff: number,
    w: B,
    wOff: number,
    s0: B | null,
    s0Off: number,
    dx: B,
    dxOff: number,
    dw: B,
    dwOff: number,
    ds0: B | null,
    ds0Off: number,
  ];
  gatedRmsNorm: [N: number, H: number, eps: number, x: B, xOff: number, z: B, zOff: number, w: B, wOff: number, y: B, yOff: number, rstd: B, rOff: number];
  gatedRmsNormBackward: [
    N: number,
    H: number,
    dy: B,
    dyOff: number,
    x: B,
    xOff: number,
    z: B,
    zOff: number,
    w: B,
    wOff: number,
    rstd: B,
    rOff: number,
    dx: B,
    dxOff: number,
    dz: B,
    dzOff: number,
    dw: B,
    dwOff: number,
  ];
  gdnGating: [
    N: number,
    H: number,
    a: B,
    aOff: number,
    b: B,
    bOff: number,
    aLog: B,
    alOff: number,
    dtBias: B,
    dtOff: number,
    g: B,
    gOff: number,
    beta: B,
    betaOff: number,
  ];
  gdnGatingBackward: [
    N: number,
    H: number,
    dg: B,
    dgOff: number,
    dbeta: B,
    dbOff: number,
    a: B,
    aOff: number,
    b: B,
    bOff: number,
    aLog: B,
    alOff: number,
    dtBias: B,
    dtOff: number,
    da: B,
    daOff: number,
    db: B,
    dbOff2: number,
    daLog: B,
    dalOff: number,
    ddtBias: B,
    ddtOff: number,
  ];
  sample: [
    B: number,
    V: number,
    temperature: number,
    topK: number,
    topP: number,
    seedLo: number,
    seedHi: number,
    offsetLo: number,
    offsetHi: number,
    logits: B,
    zOff: number,
    out: B,
    outOff: number,
  ];
}

export interface NativeStream {
  /** Enqueues model kernel `name` (impl 0 = fast, 1 = reference); returns the op's seq. */
  modelOp<K extends keyof NativeModelOps>(name: K, ...args: [...NativeModelOps[K], impl: number, token: number]): number;
  /** Philox4x32-10 of one counter (synchronous, no device work): the RNG of sample(), for known-answer tests. */
  modelOp(name: 'philox', keyLo: number, keyHi: number, c0: number, c1: number, c2: number, c3: number): [number, number, number, number];
}

// ---- end of model kernels ----

export interface NativeBinding extends NativeCommBinding {
  readonly Stream: (new (device: number) => NativeStream) & { nowUs(): number };
  readonly Event: new (device: number) => NativeEvent;
  init(
    errorFactory: (code: string, message: string, details: ErrorDetails) => Error,
    onComplete: (token: number, error: Error | undefined, bytes: ArrayBuffer | undefined) => void,
  ): void;
  setCompletionRef(ref: boolean): void;
  deviceGet(ordinal: number, defaultCapacity: number): { ordinal: number; capacity: number };
  deviceConfigure(ordinal: number, capacity: number): { ordinal: number; capacity: number };
  deviceStats(ordinal: number): NativeDeviceStats;
  deviceResetPeak(ordinal: number): void;
  deviceEmptyCache(ordinal: number): number;
  /** A new buffer's handle; its [id, device, size] are in BUFFER_INFO. */
  alloc(ordinal: number, bytes: number): NativeBufferHandle;
  /** A new handle (own reference) to live block `id`; its [id, device, size] are in BUFFER_INFO. */
  importBuffer(id: number): NativeBufferHandle;
  /** Drops the handle's reference to its block; a no-op the second time. */
  releaseBuffer(handle: NativeBufferHandle): void;
  /** Tells native where buffers keep their handle and where to write a new buffer's metadata. */
  initBuffers(handleKey: symbol, info: Float64Array): void;
  hostMemory(): number;
  /** CPU features; `amx` only when usable (CPU, OS and this process's tile permission), else `amxWhyNot` says why. */
  cpuFeatures(): { avx2: boolean; fma: boolean; avx512f: boolean; avx512bf16: boolean; amx: boolean; amxWhyNot: string | null };
  /** Benchmark baseline (native/bench/blas_baseline.cc): OpenBLAS found by dlopen, if installed. */
  blasInfo(): { available: boolean; library: string | null; config: string | null };
  /** Seconds of one single-threaded OpenBLAS sgemm C[m,n] = op(A)·op(B) (A stored [k,m] when transA, B [n,k] when transB): best of 3 rounds of `reps` calls. */
  blasSgemmSeconds(m: number, n: number, k: number, reps: number, transA?: boolean, transB?: boolean): number;
  /**
   * Benchmark floor (native/bench/comm_floor.cc): `iters` back-to-back fp32 sum allReduces of `bytes` on `nranks`
   * plain threads running the real native collective (no JS, no stream threads); blocks the caller.
   */
  commFloorBench(nranks: number, bytes: number, iters: number): { p10Us: number; p50Us: number; p90Us: number; cpuUsPerOp: number; sleepsPerOp: number };
  /** The completion of the op with `token` if it ran inline during the enqueue call just made (else undefined); taken once. */
  takeInlineCompletion(token: number): { error: Error | undefined; bytes: ArrayBuffer | undefined } | undefined;
  /**
   * Test hook, process-wide: force a matmul micro-kernel family (a mode the CPU lacks falls back below it:
   * 'amx' to avx512-bf16, then the fp32 kernels; 'avx512' keeps bf16 on avx512-bf16 even where AMX is usable);
   * returns the kernels now used, and `vec`, the vector primitives of the model kernels ('portable' only when
   * forced or when the CPU lacks AVX2+FMA).
   */
  setMatmulKernel(mode: 'auto' | 'portable' | 'avx2' | 'avx512' | 'amx'): {
    fp32: 'avx512' | 'avx2-fma' | 'portable';
    bf16: 'amx-bf16' | 'avx512-bf16' | 'avx512' | 'avx2-fma' | 'portable';
    vec: 'avx2-fma' | 'portable';
  };
}

/** Directory holding Ascent's package.json, found from this file in src/ or dist/src/. */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg)) {
      try {
        if ((JSON.parse(readFileSync(pkg, 'utf8')) as { name?: string }).name === 'ascent') return dir;
      } catch {
        // not ours; keep walking
      }
    }
    const parent = dirname(dir);
    if (parent === dir) throw new InternalError('Could not find the ascent package root above ' + fileURLToPath(import.meta.url));
    dir = parent;
  }
}

export function addonPath(): string {
  return join(packageRoot(), 'build', 'Release', 'ascent_native.node');
}

let binding: NativeBinding | undefined;

/**
 * What waits for a registered completion token: settled once, by the completion callback.
 * Ops that need more than a promise per completion (collectives: one promise per op, no
 * wrapper around it) implement it themselves and register through registerCompletion().
 */
export interface CompletionWaiter {
  settle(error: Error | undefined, bytes: ArrayBuffer | undefined): void;
  /** Keeps the event loop alive while it waits (set through setAwaited only). */
  awaited: boolean;
}

/** enqueueWithCompletion's waiter: a plain promise for the completion's bytes. */
class PromiseWaiter implements CompletionWaiter {
  awaited = false;
  constructor(
    readonly resolve: (bytes: ArrayBuffer | undefined) => void,
    readonly reject: (err: Error) => void,
  ) {}
  settle(error: Error | undefined, bytes: ArrayBuffer | undefined): void {
    if (error) this.reject(error);
    else this.resolve(bytes);
  }
}

const pending = new Map<number, CompletionWaiter>();
let nextToken = 1;
let awaitedCount = 0;

function setAwaited(p: CompletionWaiter, awaited: boolean): void {
  if (p.awaited === awaited) return;
  p.awaited = awaited;
  awaitedCount += awaited ? 1 : -1;
  // The TSFN is ref'd only while something is awaited, so an idle thread can exit.
  if (awaited && awaitedCount === 1) binding!.setCompletionRef(true);
  if (!awaited && awaitedCount === 0) binding!.setCompletionRef(false);
}

function onComplete(token: number, error: Error | undefined, bytes: ArrayBuffer | undefined): void {
  const p = pending.get(token);
  if (!p) return; // forgotten after a timeout
  pending.delete(token);
  setAwaited(p, false);
  p.settle(error, bytes);
}

/** Loads the addon once per thread and installs this env's error factory and completion callback. */
export function loadNative(): NativeBinding {
  if (binding) return binding;
  const path = addonPath();
  if (!existsSync(path)) {
    throw new Error(`The native addon is not built (${path} is missing). HINT: run \`npm run build:native\`.`);
  }
  // A second copy of this module in the same thread (e.g. `import 'ascent'` from dist/ and a
  // `../src/...` import through tsx) would re-init the addon and take over its completion
  // callback, so the first copy's awaits would never settle: a silent hang. Refuse it loudly.
  const owner = globalThis as { [OWNER]?: string };
  if (owner[OWNER] !== undefined && owner[OWNER] !== import.meta.url) {
    throw new Error(
      `Ascent's runtime is loaded twice in this thread: ${owner[OWNER]} and ${import.meta.url}. ` +
        "HINT: import Ascent from one place only (in entries and actors: `from 'ascent'`, not from ../src/...).",
    );
  }
  owner[OWNER] = import.meta.url;
  const b = createRequire(import.meta.url)(path) as NativeBinding;
  b.init((code, message, details) => errorFromCode(code, message, details), onComplete);
  b.initBuffers(BUFFER_HANDLE, BUFFER_INFO);
  binding = b;
  return b;
}

const OWNER = Symbol.for('ascent.native.owner');

/**
 * A completion the native side will report for an op: call `enqueue(token)` (which
 * may throw synchronously; then nothing is registered) and get a promise for it.
 * `awaited: false` registers it without keeping the event loop alive.
 */
export function enqueueWithCompletion(enqueue: (token: number) => void, awaited = true): { token: number; promise: Promise<ArrayBuffer | undefined> } {
  const b = loadNative();
  const token = nextToken++;
  enqueue(token);
  // An op that found its stream idle ran inline during enqueue(): its completion is ready now,
  // without the trip through the thread-safe function and the event loop.
  const done = b.takeInlineCompletion(token);
  if (done) {
    const settled = done.error ? Promise.reject(done.error) : Promise.resolve(done.bytes);
    settled.catch(() => undefined); // as below: an unawaited failure is not an unhandled rejection
    return { token, promise: settled };
  }
  let entry!: PromiseWaiter;
  const promise = new Promise<ArrayBuffer | undefined>((resolve, reject) => {
    entry = new PromiseWaiter(resolve, reject);
  });
  // Handled here so an unawaited completion that fails is not an unhandled rejection;
  // callers that return the promise still see the rejection.
  promise.catch(() => undefined);
  pending.set(token, entry);
  if (awaited) setAwaited(entry, true);
  return { token, promise };
}

/**
 * A fresh completion token for an enqueue of an op that never runs inline (a collective:
 * its completion always comes through the completion callback); pass it to the enqueue,
 * then to registerCompletion(). An enqueue that throws leaves the token unused.
 */
export function newCompletionToken(): number {
  loadNative();
  return nextToken++;
}

/** Registers `waiter` (awaited: keeps the event loop alive) for `token`, just enqueued. */
export function registerCompletion(token: number, waiter: CompletionWaiter): void {
  pending.set(token, waiter);
  setAwaited(waiter, true);
}

/** Marks a registered completion as awaited (keeps the loop alive until it arrives). */
export function awaitCompletion(token: number): void {
  const p = pending.get(token);
  if (p) setAwaited(p, true);
}

/** Stops waiting for `token` (after a timeout); a late completion is ignored. */
export function forgetCompletion(token: number): void {
  const p = pending.get(token);
  if (!p) return;
  pending.delete(token);
  setAwaited(p, false);
}

/** Whether a completion for `token` is still outstanding. */
export function isCompletionPending(token: number): boolean {
  return pending.has(token);
}

/** Rewrites `err.stack` to point at the caller captured in `site` before going async (sharp style). */
export function withCallerStack<E extends Error>(err: E, site: Error): E {
  const frames = (site.stack ?? '').split('\n').slice(1).join('\n');
  if (frames) err.stack = `${err.name}: ${err.message}\n${frames}`;
  return err;
}
