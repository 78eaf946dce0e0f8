// A Bootstrap and a zrt_oob_t that exchange records through files in a shared folder (the
// harness's $ZRT_TEST_RUN_DIR), for tests that must not depend on the TCP store: each round
// every rank writes <dir>/<name>.<round>.<rank> (write to a temporary name, then rename, so a
// reader never sees half a record) and polls, with short sleeps, until every peer's file of the
// round exists or the timeout passes. Files are left for the harness to remove with the folder.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "lib/bootstrap/bootstrap.h"
#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt::testing {

// `name` separates independent bootstraps of one run (e.g. two communicators).
Status create_file_bootstrap(const std::string& dir, const std::string& name, int rank, int size,
                             int64_t timeout_ms, std::unique_ptr<Bootstrap>* bootstrap);

// Returns once every rank of the run has called it with the same `name` (a barrier through
// files, outside any communicator, so it still works when the communicator under test has
// failed), or fails with ZRT_TIMEOUT naming the ranks that did not arrive within `timeout_ms`.
// For tests whose ranks must line up before one of them stops taking part.
Status file_barrier(const std::string& dir, const std::string& name, int rank, int size,
                    int64_t timeout_ms = 30000);

// The same exchange behind zrt_oob_t's callbacks. The FileOob must outlive every use of oob().
class FileOob {
 public:
  FileOob(std::string dir, std::string name, int rank, int size, int64_t timeout_ms = 30000);
  const zrt_oob_t& oob() const { return oob_; }
  zrt_oob_t& oob() { return oob_; }

  // Implementation of the callbacks (public for the C trampolines).
  zrt_status_t start(const void* sendbuf, void* recvbuf, size_t bytes, void** request);

  std::string dir_;
  std::string name_;
  int rank_;
  int size_;
  int64_t timeout_ms_;
  uint64_t round_ = 0;
  zrt_oob_t oob_ = ZRT_OOB_INIT;
};

}  // namespace zrt::testing
