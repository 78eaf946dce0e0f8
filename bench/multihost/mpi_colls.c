/* mpi_colls: Open MPI's reduce-scatter, all-gather and all-reduce at the sizes zrt-bench uses,
 * for bench/multihost/compare.sh. The size is the whole buffer (reduce-scatter and all-gather
 * move size / N per rank, as in zrt-bench and nccl-tests), float sum, out of place, -w warm-up
 * and -n timed blocking calls after a barrier; prints "collective bytes time_us" per point, the
 * time being the slowest rank's mean.
 *
 *   mpirun ... mpi_colls MIN_BYTES MAX_BYTES ITERS WARMUP
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static double run(int coll, float* send, float* recv, int count, int iters) {
  double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    if (coll == 0) MPI_Reduce_scatter_block(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (coll == 1) MPI_Allgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD);
    if (coll == 2) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  return (MPI_Wtime() - start) / iters;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 5) {
    if (rank == 0) fprintf(stderr, "usage: mpi_colls MIN_BYTES MAX_BYTES ITERS WARMUP\n");
    MPI_Finalize();
    return 2;
  }
  const long min_bytes = atol(argv[1]), max_bytes = atol(argv[2]);
  const int iters = atoi(argv[3]), warmup = atoi(argv[4]);
  /* Buffers allocated and touched once, as zrt-bench's are (first touch is not the subject). */
  float* send = calloc((size_t)max_bytes / 4 + 1, 4);
  float* recv = calloc((size_t)max_bytes / 4 + 1, 4);
  const char* names[3] = {"reduce_scatter", "all_gather", "all_reduce"};
  for (int coll = 0; coll < 3; ++coll) {
    for (long bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
      const int count = (int)(coll == 2 ? bytes / 4 : bytes / 4 / size);
      run(coll, send, recv, count, warmup);
      MPI_Barrier(MPI_COMM_WORLD);
      double mine = run(coll, send, recv, count, iters), slowest = 0;
      MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      if (rank == 0) printf("%s %ld %.2f\n", names[coll], bytes, slowest * 1e6);
    }
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
