// SubringGather: one ring all-gather among a subset of the communicator's ranks, over blocks
// that need not be contiguous, as the two-level collectives run it job after job
// (two_level_all_gather.h). RingAllGather's ring (ring_all_gather.h) with ranks replaced by
// positions in `members`: each member's block walks the ring to the right, received straight
// into its place in the output and forwarded from there. A job is done when every block arrived
// and every send completed.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "collectives/coll_task.h"

namespace zrt {

class SubringGather {
 public:
  static constexpr int kWindow = 4;

  // `members` (comm ranks in ring order) must outlive the object; `me` is this rank's position.
  void init(const std::vector<int>* members, int me, size_t chunk_bytes, size_t element_size);
  // Starts a job: block j is `length[j]` elements at `output[j]` (arrays of members.size());
  // this rank's own block is read from `own` and copied to output[me] unless they are the same.
  void begin(char* const* output, const size_t* length, const char* own, uint32_t tag_first);
  // The next job's first message (unit 0's send to the right, and its receive from the left)
  // carries the task's fingerprint in front of its data (fingerprint_check.h).
  void carry_fingerprint() { fingerprint_first_ = true; }
  Status progress(TaskContext& context, CollTask& task, bool* moved);
  bool active() const { return active_; }
  uint32_t units() const { return static_cast<uint32_t>(unit_count_); }
  int left() const { return left_; }

 private:
  size_t chunk_count(int block, size_t chunk) const;
  char* output_chunk(int block, size_t chunk) const;

  int me_ = 0;
  int size_ = 1;
  int left_ = 0;
  int right_ = 0;
  size_t element_size_ = 1;
  size_t chunk_elems_ = 1;

  bool active_ = false;
  char* const* output_ = nullptr;
  const size_t* length_ = nullptr;
  const char* own_ = nullptr;
  uint32_t tag_first_ = 0;
  bool fingerprint_first_ = false;
  uint64_t unit_count_ = 0;
  uint64_t next_post_ = 0;
  uint64_t next_done_ = 0;
  std::array<PostedOp, kWindow> recvs_;
  std::array<PostedOp, kWindow> sends_;
};

}  // namespace zrt
