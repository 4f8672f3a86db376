/*
 * Open MPI's own MPI_Allreduce (fp32 sum), the baseline column of the 2-process rows
 * of `bench collectives` (bench/collectives-mpi.ts builds it with mpicc and runs it
 * under mpirun with as many processes as the Ascent rows have ranks).
 *
 *   mpi-allreduce <iters> <bytes>...
 *
 * Per size: 3 warm-up calls, a barrier, `iters` timed calls; prints on rank 0
 * "<bytes> <time us> <wrong>", time = the slowest process's mean per call, wrong =
 * elements (over every process) differing from the exact sum of rank + 1.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 3) {
    if (rank == 0) fprintf(stderr, "usage: mpi-allreduce <iters> <bytes>...\n");
    MPI_Finalize();
    return 2;
  }
  int iters = atoi(argv[1]);
  for (int a = 2; a < argc; a++) {
    long n = atol(argv[a]) / 4;
    float* send = malloc(n * sizeof(float));
    float* recv = malloc(n * sizeof(float));
    for (long i = 0; i < n; i++) send[i] = (float)(rank + 1);
    for (int w = 0; w < 3; w++) MPI_Allreduce(send, recv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) MPI_Allreduce(send, recv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double mine = (MPI_Wtime() - t0) / iters, worst = 0;
    MPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    const float want = (float)size * (size + 1) / 2;
    long wrong = 0, wrongAll = 0;
    for (long i = 0; i < n; i++) wrong += recv[i] != want;
    MPI_Reduce(&wrong, &wrongAll, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("%ld %.3f %ld\n", n * 4, worst * 1e6, wrongAll);
    free(send);
    free(recv);
  }
  MPI_Finalize();
  return 0;
}
