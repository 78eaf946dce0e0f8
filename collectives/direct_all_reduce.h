// Direct-exchange all-reduce, the latency-optimal path for small messages.
//
// Every rank sends its whole input to every other rank in one round and receives every peer's
// input into its stream's staging memory (slot p for rank p; its own input is copied to slot
// r). It then reduces the N inputs in rank order, ((x[0] + x[1]) + x[2]) + ..., so every rank
// computes the same operations on the same operands: results are bitwise identical on all
// ranks and from run to run. One round trip instead of 2(N-1) ring steps; N-1 times the bytes
// of a ring, which is why it serves small messages only. Messages larger than the staging
// memory allows (N slots) are processed in consecutive segments.
//
// With the default fingerprint (fingerprint_check.h) each slot starts with a 64-byte header:
// a rank copies its input behind its call's fingerprint and sends header and data as one
// message from its staging, and compares each peer's header before reducing.
#pragma once

#include <vector>

#include "collectives/coll_task.h"

namespace zrt {

class DirectAllReduce final : public Phase {
 public:
  DirectAllReduce(const void* input, void* output, size_t count, const ReduceSpec& spec)
      : input_(static_cast<const char*>(input)),
        output_(static_cast<char*>(output)),
        count_(count),
        spec_(spec) {}

  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;
  Status start_fingerprint(TaskContext&, CollTask&) override { return Status::ok(); }

  // Elements per segment for `size` ranks and `scratch_bytes` of staging.
  static size_t segment_elements(int size, size_t scratch_bytes, size_t element_size);

 private:
  Status post_segment(TaskContext& context, CollTask& task);
  // A peer's segment: its header's fingerprint first, then the byte count.
  Status collect_segment(CollTask& task, int peer, size_t bytes);
  char* slot(int rank) const { return scratch_ + static_cast<size_t>(rank) * stride_; }

  const char* input_;
  char* output_;
  size_t count_;
  ReduceSpec spec_;
  char* scratch_ = nullptr;
  size_t segment_elems_ = 0;
  size_t header_ = 0;   // kFingerprintHeaderBytes with the fingerprint, else 0
  size_t stride_ = 0;   // header_ + a segment's bytes
  size_t segment_ = 0;  // index of the segment in flight
  size_t segments_ = 0;
  std::vector<PostedOp> sends_;  // per peer rank; sized once at start
  std::vector<PostedOp> recvs_;
};

}  // namespace zrt
