/**
 * Public API of the weight-sync coordinator: colocated and server-mode full syncs, the
 * LoRA adapter sync, the report, and the bucket planner. Re-exported by src/index.ts.
 */
export { ColocateSync } from './colocate.js';
export { ServerSync, type ServerSyncOptions } from './server.js';
export { DEFAULT_BUCKET_BYTES as DEFAULT_SYNC_BUCKET_BYTES, paramBytes, type SyncReport, type SyncOptions, type Verified as SyncVerified } from './report.js';
export type { VerifyOptions } from './verify.js';
export { planBuckets, type Bucket, type BucketItem, type Segment } from './buckets.js';
