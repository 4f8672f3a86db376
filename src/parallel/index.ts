/** Public API of the parallel layer (device mesh, placements, DTensor, sharded loading), re-exported by src/index.ts. */
export { DeviceMesh, coordinateOf, type DeviceMeshOptions } from './device-mesh.js';
export {
  Shard,
  Replicate,
  Partial,
  chunkRange,
  chunkSize,
  localShape,
  localBox,
  formatPlacement,
  formatPlacements,
  samePlacements,
  type Placement,
  type ShardPlacement,
  type ReplicatePlacement,
  type PartialPlacement,
} from './placement.js';
export { DTensor, type FromLocalOptions, type RedistributeOptions } from './dtensor.js';
export {
  loadSharded,
  loadShardedHost,
  sliceHost,
  LOAD_MODES,
  DEFAULT_BUCKET_BYTES,
  type LoadMode,
  type ShardedLoadOptions,
  type PlacementPlan,
  type ParamMeta,
  type HostShard,
} from './sharded-load.js';
