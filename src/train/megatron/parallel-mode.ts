/**
 * How a megatron linear is split over tp: 'column' (output features sharded; the input's
 * gradient summed over tp), 'row' (input features sharded; the output summed over tp) or
 * 'replicated' (the whole weight on every TP rank, no communication: the Gated DeltaNet
 * projections and the shared expert's gate).
 */
export type ParallelMode = 'column' | 'row' | 'replicated';
