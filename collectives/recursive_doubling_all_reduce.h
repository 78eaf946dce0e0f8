// Recursive-doubling all-reduce with the non-power-of-two fold (Rabenseifner's pre/post steps).
//
// Let P be the largest power of two <= N and R = N - P. Fold: among the first 2R ranks, each
// even rank sends its input to the odd rank above it, which combines them (even rank's data
// first) and stands for both; the others stand for themselves. The P stand-ins then run log2(P)
// rounds: in round j, virtual rank v exchanges its whole partial with v ^ 2^j and both compute
// (partial of the lower virtual rank) OP (partial of the higher one). Both partners apply the
// same operation to the same operands, so after the last round every stand-in holds bitwise the
// same result; unfold: each odd rank of the first 2R sends it back to its even partner.
// The reduction order is a fixed tree: identical on every rank and every run. Latency:
// log2(P) + 2 message steps, each of the full message, so it serves small messages; larger ones
// run in segments of the stream's staging memory. Pre-multiplication (ZRT_AVG, premul sums) is
// applied to each rank's input exactly once, where it first enters a combination.
#pragma once

#include <array>

#include "collectives/coll_task.h"

namespace zrt {

class RecursiveDoublingAllReduce final : public Phase {
 public:
  RecursiveDoublingAllReduce(const void* input, void* output, size_t count, const ReduceSpec& spec)
      : input_(static_cast<const char*>(input)),
        output_(static_cast<char*>(output)),
        count_(count),
        spec_(spec) {}

  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;

 private:
  // One message step of a segment: send the partial, receive the peer's, then combine.
  struct Step {
    int send_to = -1;
    int recv_from = -1;
    bool recv_into_output = false;  // the unfold: the result arrives whole
    bool combine = false;
    bool peer_is_lower = false;
    double my_scale = 1.0;
    double peer_scale = 1.0;
    uint32_t tag = 0;  // the same on both sides: 0 fold, 1 + round, 64 unfold
  };

  void plan(int rank, int size);
  Status post_step(TaskContext& context, CollTask& task);

  const char* input_;
  char* output_;
  size_t count_;
  ReduceSpec spec_;
  char* scratch_ = nullptr;
  size_t segment_elems_ = 0;
  size_t segments_ = 0;
  size_t segment_ = 0;
  std::array<Step, 66> steps_{};
  int step_count_ = 0;
  int step_ = 0;
  bool step_posted_ = false;
  PostedOp send_;
  PostedOp recv_;
};

}  // namespace zrt
