// Where a process sits in an mpirun job, read from Open MPI's environment; the abort-notice culprit tag.
import { describe, expect, it } from 'vitest';
import { describeProcess, detectMpiJob } from '../src/runtime/actor-system/mpi-job.js';
import { culpritTag, netError, taggedCulprits } from '../src/runtime/comm/net.js';

describe('mpirun job detection', () => {
  it('outside mpirun there is no job (nothing touches MPI)', () => {
    expect(detectMpiJob({})).toBeNull();
    expect(detectMpiJob({ RANK: '3', WORLD_SIZE: '8' })).toBeNull();
  });

  it("reads the process's place from OMPI_COMM_WORLD_*", () => {
    expect(detectMpiJob({ OMPI_COMM_WORLD_SIZE: '2', OMPI_COMM_WORLD_RANK: '1', OMPI_COMM_WORLD_LOCAL_RANK: '1' })).toEqual({
      nnodes: 2,
      nodeRank: 1,
      localProcess: 1,
      localSize: 2,
    });
    expect(detectMpiJob({ OMPI_COMM_WORLD_SIZE: '4', OMPI_COMM_WORLD_RANK: '0' })).toEqual({ nnodes: 4, nodeRank: 0, localProcess: 0, localSize: 4 });
    // Processes on several hosts: the actor gateway then listens on TCP instead of a Unix socket.
    expect(detectMpiJob({ OMPI_COMM_WORLD_SIZE: '4', OMPI_COMM_WORLD_RANK: '3', OMPI_COMM_WORLD_LOCAL_SIZE: '2' })?.localSize).toBe(2);
  });

  it.each([
    [
      { OMPI_COMM_WORLD_SIZE: 'two', OMPI_COMM_WORLD_RANK: '0' },
      /OMPI_COMM_WORLD_SIZE="two" is not an integer >= 1.*HINT: start the processes with Open MPI's mpirun/,
    ],
    [{ OMPI_COMM_WORLD_SIZE: '0', OMPI_COMM_WORLD_RANK: '0' }, /OMPI_COMM_WORLD_SIZE="0" is not an integer >= 1/],
    [{ OMPI_COMM_WORLD_SIZE: '2' }, /OMPI_COMM_WORLD_RANK=undefined is not an integer >= 0/],
    [{ OMPI_COMM_WORLD_SIZE: '2', OMPI_COMM_WORLD_RANK: '2' }, /OMPI_COMM_WORLD_RANK=2 is not below OMPI_COMM_WORLD_SIZE=2. HINT/],
  ])('a malformed mpirun environment is a ConfigError saying what to do (%o)', (env, message) => {
    expect(() => detectMpiJob(env)).toThrow(message);
    try {
      detectMpiJob(env);
    } catch (e) {
      expect((e as { code?: string }).code).toBe('ASCENT_CONFIG');
    }
  });

  it('names a process by its global ranks', () => {
    expect(describeProcess(1, 2)).toBe('process 1 (ranks 2-3)');
    expect(describeProcess(3, 1)).toBe('process 3 (rank 3)');
  });

  it('abort notices carry their culprit ranks as a tag that errors of the net leg read back', () => {
    expect(culpritTag([])).toBe('');
    const reason = `${culpritTag([3, 5])}process 1 (ranks 2-5): rank 3 failed`;
    expect(taggedCulprits(reason)).toEqual([3, 5]);
    const err = netError({ message: `aborted: ${reason}`, netCode: 'aborted', culpritProcesses: [1] }, 'allReduce()', 4);
    expect(err.code).toBe('ASCENT_COMM_ABORTED');
    expect(err.details).toEqual({ culpritProcesses: [1], culpritWorldRanks: [3, 5] });
    // Without a tag, every rank of the processes at fault.
    const timeout = netError({ message: 'late', netCode: 'timeout', culpritProcesses: [1] }, 'allReduce()', 2);
    expect(timeout.code).toBe('ASCENT_COLLECTIVE_TIMEOUT');
    expect(timeout.details?.culpritWorldRanks).toEqual([2, 3]);
    expect(timeout.message).toMatch(/HINT: every process must call the same collectives/);
    expect(netError({ message: 'x', netCode: 'mismatch', culpritProcesses: [] }, 'f').code).toBe('ASCENT_COLLECTIVE_MISMATCH');
    expect(netError(new Error('boom'), 'f').code).toBe('ASCENT_INTERNAL');
  });
});
