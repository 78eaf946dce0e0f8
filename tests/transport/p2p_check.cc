// p2p_check: a standalone program (public C API only) that sends a message of every size between
// every ordered pair of ranks, itself included, verifies every byte, and exits non-zero on any
// mismatch or error. Run it under a launcher: `zrt-run -n 8 p2p_check`. 256 MiB messages are
// exchanged only when size <= 3 (memory and time on small machines); pass --large to force.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "zrt/zrt.h"

namespace {

uint8_t pattern(int src, int dst, size_t index) {
  return static_cast<uint8_t>(((index * 2654435761u) >> 11) ^ (src * 31 + dst * 17 + index));
}

#define CHECK_ZRT(expr)                                                           \
  do {                                                                            \
    zrt_status_t check_status_ = (expr);                                          \
    if (check_status_ != ZRT_SUCCESS) {                                           \
      std::fprintf(stderr, "p2p_check rank %d: %s failed: %s: %s\n", rank, #expr, \
                   zrt_status_string(check_status_), zrt_last_error());           \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  const bool force_large = argc > 1 && std::strcmp(argv[1], "--large") == 0;
  int rank = -1, size = 0;
  zrt_comm_t comm = nullptr;
  const auto start = std::chrono::steady_clock::now();
  CHECK_ZRT(zrt_comm_init_env(nullptr, &comm));
  CHECK_ZRT(zrt_comm_rank(comm, &rank));
  CHECK_ZRT(zrt_comm_size(comm, &size));
  zrt_stream_t stream = nullptr;
  CHECK_ZRT(zrt_stream_create(comm, ZRT_MEM_HOST, &stream));
  std::vector<size_t> sizes = {0, 1, 4096, size_t{1} << 20};
  if (size <= 3 || force_large) sizes.push_back(size_t{256} << 20);
  int failures = 0;
  for (size_t bytes : sizes) {
    // Every ordered pair (src, dst) in one global order, so that the two ranks of a step post
    // their halves while everyone else waits for a later step: no cycle of waits can form on
    // ordered streams, and src == dst (a local copy) sends before it receives.
    std::vector<uint8_t> out(bytes), in(bytes);
    for (int src = 0; src < size; ++src) {
      for (int dst = 0; dst < size; ++dst) {
        if (src != rank && dst != rank) continue;
        if (src == rank) {
          for (size_t i = 0; i < bytes; ++i) out[i] = pattern(rank, dst, i);
          CHECK_ZRT(zrt_send(comm, out.data(), bytes, ZRT_U8, dst, stream));
        }
        if (dst == rank) {
          std::fill(in.begin(), in.end(), uint8_t{0});  // memset of the empty (NULL) vector is UB
          CHECK_ZRT(zrt_recv(comm, in.data(), bytes, ZRT_U8, src, stream));
        }
        CHECK_ZRT(zrt_stream_synchronize(stream));
        if (dst != rank) continue;
        for (size_t i = 0; i < bytes; ++i) {
          if (in[i] != pattern(src, rank, i)) {
            std::fprintf(stderr,
                         "p2p_check rank %d: %zu-byte message from rank %d: byte %zu is %u\n", rank,
                         bytes, src, i, in[i]);
            ++failures;
            break;
          }
        }
      }
    }
  }
  CHECK_ZRT(zrt_barrier(comm, stream));
  CHECK_ZRT(zrt_stream_synchronize(stream));
  CHECK_ZRT(zrt_comm_destroy(comm));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rank == 0 || failures > 0) {
    std::printf("p2p_check rank %d of %d: %zu sizes x %d pairs, %d mismatches, %.2f s\n", rank,
                size, sizes.size(), size * size, failures, seconds);
  }
  return failures == 0 ? 0 : 1;
}
