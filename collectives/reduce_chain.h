// Pipelined chain reduce.
//
// The partial result walks a chain in ring order that starts just after the root and ends at
// it: root+1, root+2, ..., root. The first rank sends its input chunks straight from user
// memory; every later rank receives a chunk of the partial into a small staging slot, adds its
// own input, and passes it on from a send slot; the root writes the final chunk into its output.
// The reduction order is therefore fixed, ((x[root+1] + x[root+2]) + ...) + x[root], on every
// run. Chunks pipeline with kSlots receives and kSlots sends in flight, as in the ring
// reduce-scatter (whose staging layout this shares).
#pragma once

#include "collectives/coll_task.h"

namespace zrt {

class ReduceChain final : public Phase {
 public:
  static constexpr int kSlots = 4;
  static constexpr size_t kSlotBytes = size_t{256} << 10;

  ReduceChain(const void* input, void* output, size_t count, const ReduceSpec& spec, int root)
      : input_(static_cast<const char*>(input)),
        output_(static_cast<char*>(output)),
        count_(count),
        spec_(spec),
        root_(root) {}

  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;

 private:
  size_t chunk_count(uint64_t chunk) const;

  const char* input_;
  char* output_;
  size_t count_;
  ReduceSpec spec_;
  int root_;
  int position_ = 0;
  int left_ = 0;
  int right_ = 0;
  size_t chunk_elems_ = 0;
  uint64_t chunks_ = 0;
  uint64_t next_post_ = 0;
  uint64_t next_done_ = 0;
  std::array<PostedOp, kSlots> recvs_;
  std::array<PostedOp, kSlots> sends_;
  std::array<char*, kSlots> recv_slots_{};
  std::array<char*, kSlots> send_slots_{};
};

}  // namespace zrt
