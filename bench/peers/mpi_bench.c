/* mpi_bench: Open MPI's reduce-scatter, all-gather and all-reduce measured the way zrt-bench
 * measures zrt's, so that bench/peers/compare.py can put the two side by side: the same sizes
 * (-b -e -f, geometric), the same shapes (the size is the whole buffer; reduce-scatter and
 * all-gather move size / N per rank), float sum, -w warm-up and -n timed calls per point after a
 * barrier, the time averaged over ranks, and nccl-tests' columns and busbw factors, out of place
 * then in place (MPI_IN_PLACE). Calls are blocking, as MPI's are.
 *
 *   mpirun -n 2 mpi_bench [-b 4K] [-e 4M] [-f 2] [-n 20] [-w 5] [reduce_scatter all_gather
 *   all_reduce]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum coll { REDUCE_SCATTER, ALL_GATHER, ALL_REDUCE, COLL_COUNT };
static const char* const coll_names[COLL_COUNT] = {"reduce_scatter", "all_gather", "all_reduce"};

struct options {
  uint64_t min_bytes, max_bytes;
  double factor;
  int iters, warmup;
  int run[COLL_COUNT];
};

static int parse_size(const char* text, uint64_t* bytes) {
  char* end = NULL;
  double value = strtod(text, &end);
  if (end == text || value < 0) return -1;
  uint64_t unit = 1;
  if (*end == 'K' || *end == 'k') unit = 1ull << 10;
  if (*end == 'M' || *end == 'm') unit = 1ull << 20;
  if (*end == 'G' || *end == 'g') unit = 1ull << 30;
  if (unit != 1) ++end;
  if (strcmp(end, "") != 0 && strcmp(end, "iB") != 0 && strcmp(end, "B") != 0) return -1;
  *bytes = (uint64_t)(value * (double)unit);
  return 0;
}

static int usage(int rank, const char* what) {
  if (rank == 0) {
    fprintf(stderr,
            "mpi_bench: %s\nusage: mpi_bench [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] "
            "[reduce_scatter] [all_gather] [all_reduce]\n",
            what);
  }
  return 2;
}

static int parse_options(int argc, char** argv, int rank, struct options* o) {
  o->min_bytes = 8;
  o->max_bytes = 32ull << 20;
  o->factor = 2;
  o->iters = 20;
  o->warmup = 5;
  int any = 0;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const int has_value = i + 1 < argc;
    if (strcmp(a, "-b") == 0 && has_value) {
      if (parse_size(argv[++i], &o->min_bytes) != 0) return usage(rank, "-b: not a size");
    } else if (strcmp(a, "-e") == 0 && has_value) {
      if (parse_size(argv[++i], &o->max_bytes) != 0) return usage(rank, "-e: not a size");
    } else if (strcmp(a, "-f") == 0 && has_value) {
      o->factor = atof(argv[++i]);
      if (o->factor <= 1) return usage(rank, "-f: the factor must be above 1");
    } else if (strcmp(a, "-n") == 0 && has_value) {
      o->iters = atoi(argv[++i]);
      if (o->iters < 1) return usage(rank, "-n: at least 1");
    } else if (strcmp(a, "-w") == 0 && has_value) {
      o->warmup = atoi(argv[++i]);
      if (o->warmup < 0) return usage(rank, "-w: not negative");
    } else {
      int known = 0;
      for (int c = 0; c < COLL_COUNT; ++c) {
        if (strcmp(a, coll_names[c]) == 0) o->run[c] = known = any = 1;
      }
      if (!known) return usage(rank, "unknown argument");
    }
  }
  if (o->min_bytes == 0 || o->min_bytes > o->max_bytes) return usage(rank, "-b must be 1..-e");
  if (!any) {
    for (int c = 0; c < COLL_COUNT; ++c) o->run[c] = 1;
  }
  return 0;
}

static double busbw_factor(enum coll coll, int n) {
  return coll == ALL_REDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
}

/* One call; in place: reduce-scatter reduces recv (N blocks) into its block at rank*count,
 * all-gather gathers from the rank's block of recv, all-reduce works on recv. */
static void issue(enum coll coll, float* send, float* recv, int count, int in_place) {
  switch (coll) {
    case REDUCE_SCATTER:
      MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, count, MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD);
      break;
    case ALL_GATHER:
      MPI_Allgather(in_place ? MPI_IN_PLACE : send, count, MPI_FLOAT, recv, count, MPI_FLOAT,
                    MPI_COMM_WORLD);
      break;
    default:
      MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, count, MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      break;
  }
}

static double time_point(const struct options* o, enum coll coll, float* send, float* recv,
                         int count, int in_place, int size) {
  for (int i = 0; i < o->warmup; ++i) issue(coll, send, recv, count, in_place);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < o->iters; ++i) issue(coll, send, recv, count, in_place);
  double us = (MPI_Wtime() - start) * 1e6 / o->iters;
  double sum = 0;
  MPI_Allreduce(&us, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / size;
}

static void print_measure(double us, uint64_t bytes, double factor) {
  const double algbw = us > 0 ? (double)bytes / (us * 1e3) : 0;
  printf("  %7.2f  %6.2f  %6.2f  %5s", us, algbw, algbw * factor, "N/A");
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  struct options o;
  memset(&o, 0, sizeof o);
  const int code = parse_options(argc, argv, rank, &o);
  if (code != 0) {
    MPI_Finalize();
    return code;
  }
  const size_t max_bytes = (size_t)o.max_bytes * (size_t)size;
  float* send = malloc(max_bytes);
  float* recv = malloc(max_bytes);
  if (send == NULL || recv == NULL) {
    fprintf(stderr, "mpi_bench: rank %d: cannot allocate 2 x %zu bytes\n", rank, max_bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t i = 0; i < max_bytes / sizeof(float); ++i) send[i] = recv[i] = (float)(i % 7);
  if (rank == 0) {
    printf(
        "# mpi_bench  ranks %d  minBytes %llu maxBytes %llu step: %g(factor) warmup iters: %d "
        "iters: %d validation: 0 blocking: 1 average: 1\n#\n",
        size, (unsigned long long)o.min_bytes, (unsigned long long)o.max_bytes, o.factor, o.warmup,
        o.iters);
  }
  for (int c = 0; c < COLL_COUNT; ++c) {
    if (!o.run[c]) continue;
    const enum coll coll = (enum coll)c;
    const uint64_t parts = coll == ALL_REDUCE ? 1 : (uint64_t)size;
    if (rank == 0) {
      printf("# Collective: %s\n", coll_names[c]);
      printf(
          "#                                                              out-of-place       "
          "                in-place\n"
          "#       size         count      type   redop    root     time   algbw   busbw "
          "#wrong     time   algbw   busbw #wrong\n"
          "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)     "
          "       (us)  (GB/s)  (GB/s)\n");
    }
    uint64_t previous = 0;
    for (double requested = (double)o.min_bytes; requested <= (double)o.max_bytes * 1.0000001;
         requested *= o.factor) {
      uint64_t count = (uint64_t)requested / (sizeof(float) * parts);
      if (count == 0) count = 1;
      const uint64_t bytes = count * sizeof(float) * parts;
      if (bytes == previous) continue;
      previous = bytes;
      const double out = time_point(&o, coll, send, recv, (int)count, 0, size);
      const double in = time_point(&o, coll, send, recv, (int)count, 1, size);
      if (rank == 0) {
        printf("%12llu  %12llu  %8s  %6s  %6d", (unsigned long long)bytes,
               (unsigned long long)count, "float", coll == ALL_GATHER ? "none" : "sum", -1);
        print_measure(out, bytes, busbw_factor(coll, size));
        print_measure(in, bytes, busbw_factor(coll, size));
        printf("\n");
        fflush(stdout);
      }
    }
    if (rank == 0) printf("#\n");
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
