#include "lib/bootstrap/local_ranks.h"

#include <unistd.h>

#include <cstring>
#include <vector>

namespace zrt {
namespace {

// Host names are at most 255 bytes (HOST_NAME_MAX on Linux is 64), so a 256-byte record holds
// any of them with a terminating zero.
constexpr size_t kHostRecordBytes = 256;

}  // namespace

Status derive_local_ranks(Bootstrap& bootstrap, int* local_rank, int* local_size) {
  char mine[kHostRecordBytes] = {};
  if (gethostname(mine, sizeof(mine) - 1) != 0) {
    return Status::system_error("gethostname for the local rank", errno);
  }
  const int size = bootstrap.size();
  std::vector<char> all(kHostRecordBytes * static_cast<size_t>(size));
  ZRT_RETURN_IF_ERROR(bootstrap.allgather(mine, all.data(), kHostRecordBytes)
                          .with_context("exchanging host names to derive local ranks"));
  int before = 0;
  int same = 0;
  for (int rank = 0; rank < size; ++rank) {
    const char* theirs = all.data() + kHostRecordBytes * static_cast<size_t>(rank);
    if (std::strncmp(theirs, mine, kHostRecordBytes) != 0) continue;
    ++same;
    if (rank < bootstrap.rank()) ++before;
  }
  *local_rank = before;
  *local_size = same;
  return Status::ok();
}

Status check_rank_layout(const char* what, int rank, int size, int local_rank, int local_size) {
  if (size < 1) return Status::invalid_argument("{}: size {} must be >= 1", what, size);
  if (rank < 0 || rank >= size) {
    return Status::invalid_argument("{}: rank {} is not in 0..{}", what, rank, size - 1);
  }
  if (local_rank == -1 && local_size == -1) return Status::ok();
  if (local_size < 1 || local_size > size) {
    return Status::invalid_argument("{}: local size {} is not in 1..{} (or -1 to derive)", what,
                                    local_size, size);
  }
  if (local_rank < 0 || local_rank >= local_size) {
    return Status::invalid_argument("{}: local rank {} is not in 0..{} (or -1 to derive)", what,
                                    local_rank, local_size - 1);
  }
  return Status::ok();
}

}  // namespace zrt
