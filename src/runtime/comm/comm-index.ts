/** Public API of the communicator layer, re-exported by src/index.ts. */
export {
  Communicator,
  REDUCE_OPS,
  COMM_DTYPES,
  type ReduceOp,
  type InitRankOptions,
  type SplitOptions,
  type CommTimeouts,
  type CommSettings,
  type FlightRecord,
  type FlightEntry,
  type FlightMark,
} from './comm.js';
export { CollectiveMismatchError, CollectiveTimeoutError, CommAbortedError, P2PDeadlockError } from '../errors.js';
