/**
 * A full MoE layer, forward and backward, built from the model kernels:
 *   router (x Wr^T -> softmax top-k, renorm) -> dispatch -> gather -> grouped matmul
 *   gate_up [E, 2I, H] -> swiglu -> grouped matmul down [E, H, I] -> combine
 * and back. Per-expert counts and offsets stay on the device: the whole layer must
 * perform ZERO host syncs (device.stats().hostSyncs) until the final toArray()
 * calls that check it against a plain fp64 JS MoE (whose own backward is checked
 * against finite differences).
 */
import { describe, expect, it } from 'vitest';
import { Device, Tensor, add, matmul, type KernelImpl } from '../src/runtime/device/device-index.js';
import * as K from '../src/model/kernels/index.js';
import * as R from './helpers/model-ref.js';

const d = Device.get(0);
const T = 10,
  H = 12,
  E = 5,
  k = 2,
  I = 7,
  renorm = true;

interface Params {
  x: Float32Array;
  wr: Float32Array;
  gateUp: Float32Array;
  down: Float32Array;
}

/** fp64 JS MoE: y and, given dY, the gradients of sum(dY * y). */
function jsMoe(p: { x: ArrayLike<number>; wr: ArrayLike<number>; gateUp: ArrayLike<number>; down: ArrayLike<number> }, dY?: ArrayLike<number>) {
  const { x, wr, gateUp, down } = p;
  const logits = new Float64Array(T * E);
  for (let t = 0; t < T; t++) for (let e = 0; e < E; e++) for (let c = 0; c < H; c++) logits[t * E + e] += x[t * H + c]! * wr[e * H + c]!;
  const r = R.router(logits, T, E, k, renorm);
  const y = new Float64Array(T * H);
  const dx = new Float64Array(T * H),
    dwr = new Float64Array(E * H),
    dgu = new Float64Array(E * 2 * I * H),
    ddown = new Float64Array(E * H * I);
  const dWeights = new Float64Array(T * k);
  for (let t = 0; t < T; t++) {
    for (let j = 0; j < k; j++) {
      const e = r.indices[t * k + j]!,
        w = r.weights[t * k + j]!;
      const gu = new Float64Array(2 * I);
      for (let a = 0; a < 2 * I; a++) for (let c = 0; c < H; c++) gu[a] += gateUp[(e * 2 * I + a) * H + c]! * x[t * H + c]!;
      const h = Array.from({ length: I }, (_, i) => R.silu(gu[i]!) * gu[I + i]!);
      const o = new Float64Array(H);
      for (let a = 0; a < H; a++) for (let b = 0; b < I; b++) o[a] += down[(e * H + a) * I + b]! * h[b]!;
      for (let a = 0; a < H; a++) y[t * H + a] += w * o[a]!;
      if (!dY) continue;
      const dO = Array.from({ length: H }, (_, a) => w * dY[t * H + a]!);
      dWeights[t * k + j] = o.reduce((s, v, a) => s + v * dY[t * H + a]!, 0);
      const dh = new Float64Array(I);
      for (let a = 0; a < H; a++)
        for (let b = 0; b < I; b++) {
          ddown[(e * H + a) * I + b] += dO[a]! * h[b]!;
          dh[b] += down[(e * H + a) * I + b]! * dO[a]!;
        }
      const dGU = new Float64Array(2 * I);
      for (let i = 0; i < I; i++) {
        const g = gu[i]!,
          u = gu[I + i]!,
          s = 1 / (1 + Math.exp(-g));
        dGU[i] = dh[i]! * u * s * (1 + g * (1 - s));
        dGU[I + i] = dh[i]! * g * s;
      }
      for (let a = 0; a < 2 * I; a++)
        for (let c = 0; c < H; c++) {
          dgu[(e * 2 * I + a) * H + c] += dGU[a]! * x[t * H + c]!;
          dx[t * H + c] += gateUp[(e * 2 * I + a) * H + c]! * dGU[a]!;
        }
    }
    if (!dY) continue;
    // router: weights = p[idx] / S  ->  dp  ->  softmax backward  ->  logits = x Wr^T
    const probs = r.probs.subarray(t * E, (t + 1) * E),
      idx = r.indices.subarray(t * k, (t + 1) * k);
    const S = Array.from(idx).reduce((s, e) => s + probs[e]!, 0);
    const dot = Array.from(idx).reduce((s, e, j) => s + (dWeights[t * k + j]! * probs[e]!) / S, 0);
    const dp = new Float64Array(E);
    idx.forEach((e, j) => {
      dp[e] += (dWeights[t * k + j]! - dot) / S;
    });
    const c = probs.reduce((s, p, e) => s + p * dp[e]!, 0);
    for (let e = 0; e < E; e++) {
      const dz = probs[e]! * (dp[e]! - c);
      for (let cc = 0; cc < H; cc++) {
        dx[t * H + cc] += dz * wr[e * H + cc]!;
        dwr[e * H + cc] += dz * x[t * H + cc]!;
      }
    }
  }
  return { y, dx, dwr, dgu, ddown };
}

function close(got: ArrayLike<number>, want: ArrayLike<number>, tol: number, label: string): void {
  expect(got.length, label).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    if (!(Math.abs(got[i]! - want[i]!) <= tol + tol * Math.abs(want[i]!))) throw new Error(`${label}: mismatch at ${i}: got ${got[i]} want ${want[i]}`);
  }
}

function params(): Params {
  return {
    x: R.rand(T * H, 1),
    wr: R.rand(E * H, 2, 1.5),
    gateUp: R.rand(E * 2 * I * H, 3, 0.5),
    down: R.rand(E * H * I, 4, 0.5),
  };
}

describe('MoE layer on the device', () => {
  it('the fp64 JS reference backward matches finite differences (checks the checker)', () => {
    const p = params(),
      dY = R.rand(T * H, 5);
    const g = jsMoe(p, dY);
    close(
      g.dx,
      R.fdGrad((x) => jsMoe({ ...p, x }).y, p.x, dY),
      1e-6,
      'JS dx vs FD',
    );
    close(
      g.dwr,
      R.fdGrad((wr) => jsMoe({ ...p, wr }).y, p.wr, dY),
      1e-6,
      'JS dWr vs FD',
    );
  });

  for (const impl of ['fast', 'reference'] as KernelImpl[]) {
    it(`forward and backward perform zero host syncs and match the JS MoE (${impl})`, async () => {
      const p = params(),
        dYh = R.rand(T * H, 5);
      const x = Tensor.fromArray(d, p.x, [T, H]),
        wr = Tensor.fromArray(d, p.wr, [E, H]);
      const gateUp = Tensor.fromArray(d, p.gateUp, [E, 2 * I, H]),
        down = Tensor.fromArray(d, p.down, [E, H, I]);
      const dY = Tensor.fromArray(d, dYh, [T, H]);
      const o = { impl };
      const before = d.stats().hostSyncs;

      // forward
      const logits = matmul(x, wr, { transB: true, impl });
      const r = K.routerTopK(logits, k, renorm, o);
      const disp = K.moeDispatch(r.indices, E, o);
      const xs = K.moeGather(x, disp.order, k, o);
      const gu = K.groupedMatmul(xs, gateUp, disp.offsets, o);
      const h = K.swigluFused(gu, o);
      const ys = K.groupedMatmul(h, down, disp.offsets, o);
      const y = K.moeCombine(ys, disp.order, r.weights, o);
      // backward
      const { dYs, dWeights } = K.moeCombineBackward(dY, ys, disp.order, r.weights, o);
      const gDown = K.groupedMatmulBackward(dYs, h, down, disp.offsets, o);
      const dGU = K.swigluFusedBackward(gDown.dX!, gu, o);
      const gUp = K.groupedMatmulBackward(dGU, xs, gateUp, disp.offsets, o);
      const dXe = K.moeGatherBackward(gUp.dX!, disp.order, k, o);
      const dLogits = K.routerBackward(dWeights, r.probs, r.indices, renorm, o);
      const dX = add(dXe, matmul(dLogits, wr, { impl }));
      const dWr = matmul(dLogits, x, { transA: true, impl });
      await d.defaultStream.synchronize();
      expect(d.stats().hostSyncs - before, 'host syncs during the MoE layer').toBe(0);

      const want = jsMoe(p, dYh);
      close(await y.toArray(), want.y, 1e-4, 'y');
      close(await dX.toArray(), want.dx, 1e-4, 'dX');
      close(await dWr.toArray(), want.dwr, 1e-4, 'dWr');
      close(await gUp.dW!.toArray(), want.dgu, 1e-4, 'dGateUp');
      close(await gDown.dW!.toArray(), want.ddown, 1e-4, 'dDown');
      expect(d.stats().hostSyncs - before, 'only the five checking reads count').toBe(5);
      // Every token picked k experts: the device-side counts sum to T * k.
      const counts = Array.from(await disp.counts.toArray());
      expect(counts.reduce((a, b) => a + b, 0)).toBe(T * k);
    });
  }
});
