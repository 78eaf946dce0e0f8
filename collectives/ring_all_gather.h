// Ring all-gather, pipelined in chunks.
//
// The output is N blocks (BlockLayout); rank r contributes block r. Block b travels the ring to
// the right starting at rank b: at step k rank r sends block r-k and receives block r-k-1 from
// its left neighbour, straight into the user's output (no staging: UCX's cma path copies once,
// from the sender's memory into ours). A block received at step k is forwarded at step k+1 from
// the output itself. As in the ring reduce-scatter the work is ordered chunk-major, unit
// u = c * (N - 1) + k, so a chunk is forwarded as soon as it has arrived and up to kWindow
// receives and kWindow sends are in flight.
//
// Out of place, this rank's own block is copied from the input into the output a chunk at a time
// while the transfers run; in place (the input is the output's block r) there is no copy.
// Each rank sends exactly (N-1) blocks: S(N-1)/N bytes for equal blocks. No arithmetic: the
// result is a bitwise copy of every rank's contribution.
#pragma once

#include "collectives/coll_task.h"

namespace zrt {

class RingAllGather final : public Phase {
 public:
  static constexpr int kWindow = 8;
  static constexpr size_t kChunkBytes = size_t{1} << 20;

  // own: this rank's contribution (== output + offset(rank) in place).
  RingAllGather(const void* own, void* output, BlockLayout layout, size_t element_size,
                uint32_t tag_offset)
      : own_(static_cast<const char*>(own)),
        output_(static_cast<char*>(output)),
        layout_(layout),
        element_size_(element_size),
        tag_offset_(tag_offset) {}

  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;

 private:
  size_t chunk_count(int block, size_t chunk) const;
  char* output_chunk(int block, size_t chunk) const;

  const char* own_;
  char* output_;
  BlockLayout layout_;
  size_t element_size_;
  uint32_t tag_offset_;
  size_t chunk_elems_ = 0;
  uint64_t chunks_ = 0;
  uint64_t unit_count_ = 0;
  uint64_t next_post_ = 0;
  uint64_t next_done_ = 0;
  uint64_t next_copy_ = 0;  // chunks of the own block copied (out of place)
  uint64_t copy_chunks_ = 0;
  int left_ = 0;
  int right_ = 0;
  std::array<PostedOp, kWindow> recvs_;
  std::array<PostedOp, kWindow> sends_;
};

}  // namespace zrt
