/**
 * What a weight sync reports, its options, the bucket-size default and check, and the
 * device-memory meter: extra bytes = device peak during the sync minus what was
 * allocated when it started (Device.resetPeakStats + stats()).
 */
import type { Device } from '../runtime/device/device-index.js';
import { InvalidArgumentError } from '../runtime/errors.js';
import type { ModelConfig } from '../model/config.js';
import { paramSpecs } from '../model/params.js';
import type { VerifyOptions } from './verify.js';
import type { EngineDtype } from '../rollout/weight-dtype.js';

export interface SyncReport {
  mode: 'colocate' | 'server';
  kind: 'full' | 'adapter';
  /** Weight bytes moved: fp32, or for a 'bfloat16' engine its matmul weights as bf16 (sync/wire.ts). */
  bytes: number;
  /** The engine's weight precision, when the rank knows it (a full sync): what `bytes` counts the weights in. */
  dtype?: EngineDtype;
  seconds: number;
  GBs: number;
  peakExtraBytes: number;
  tensors: number;
  verified?: Verified;
}

/**
 * What a verification checked: `checksums` (exact fingerprints compared: a full sync), how many regions over
 * all engine ranks and their cost; the probe's largest log-prob difference when a probe ran.
 */
export interface Verified {
  checksums: boolean;
  fingerprints: number;
  fingerprintSeconds: number;
  maxLogprobDiff?: number;
  /** Whole verification (fingerprints and probe). */
  seconds: number;
}

export interface SyncOptions {
  adapterOnly?: boolean;
  verify?: VerifyOptions;
}

/** 512 MiB. */
export const DEFAULT_BUCKET_BYTES = 512 * 1024 * 1024;

export function checkBucketBytes(v: unknown): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 64 || v % 64 !== 0) {
    throw new InvalidArgumentError(`Expected bucketBytes to be a multiple of 64 of at least 64 but received ${String(v)}.`, { argument: 'bucketBytes' });
  }
  return v;
}

/** fp32 bytes of every HF parameter of cfg. */
export function paramBytes(cfg: ModelConfig): number {
  return paramSpecs(cfg, { expertLayout: 'fused' }).reduce((a, s) => a + s.shape.reduce((x, y) => x * y, 1) * 4, 0);
}

export class MemoryMeter {
  private readonly base: number;
  constructor(private readonly device: Device) {
    device.resetPeakStats();
    this.base = device.stats().allocated;
  }
  peakExtra(): number {
    return Math.max(0, this.device.stats().peak - this.base);
  }
}

export function finishReport(r: Omit<SyncReport, 'GBs'>): SyncReport {
  return { ...r, GBs: r.seconds > 0 ? r.bytes / r.seconds / 1e9 : 0 };
}
