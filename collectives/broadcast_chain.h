// Pipelined chain broadcast.
//
// The ranks form a chain in ring order starting at the root: root, root+1, ..., root-1. The
// message is cut into chunks; every rank but the last receives chunk c from its predecessor
// straight into its output and forwards it to its successor as soon as it has arrived, with up
// to kWindow chunks in flight, so for large messages every link streams at once and the time is
// about S / bandwidth + (N - 2) chunk times. Small messages are a single chunk (N - 1 hops).
// Out of place, the root copies its input into its output while its sends run. A bitwise copy:
// identical on all ranks.
#pragma once

#include "collectives/coll_task.h"

namespace zrt {

class BroadcastChain final : public Phase {
 public:
  static constexpr int kWindow = 8;
  static constexpr size_t kChunkBytes = size_t{1} << 20;

  BroadcastChain(const void* input, void* output, size_t bytes, int root)
      : input_(static_cast<const char*>(input)),
        output_(static_cast<char*>(output)),
        bytes_(bytes),
        root_(root) {}

  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;

 private:
  size_t chunk_bytes(uint64_t chunk) const;

  const char* input_;
  char* output_;
  size_t bytes_;
  int root_;
  int position_ = 0;
  int left_ = 0;
  int right_ = 0;
  uint64_t chunks_ = 0;
  uint64_t next_post_ = 0;
  uint64_t next_done_ = 0;
  uint64_t next_copy_ = 0;
  std::array<PostedOp, kWindow> recvs_;
  std::array<PostedOp, kWindow> sends_;
};

}  // namespace zrt
