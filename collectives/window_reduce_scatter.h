// Window ring reduce-scatter: the ring reduce-scatter of ring_reduce_scatter.h, with chunks
// written straight into the right neighbour's inbox (ring_window.h) instead of sent as tagged
// messages. Same blocks, same chunk-major units u = c * (N - 1) + k, same reduction order, so
// the results are bitwise identical to the tagged ring's for the same chunking.
//
// Unit (c, k) on rank r: the chunk of block r-2-k arrives in inbox slot u from the left; if
// k < N-2 the reduction (inbox + own input) goes straight into the right neighbour's slot u+1,
// otherwise into the user's output. Step 0's chunks (c, 0) are copies of this rank's input
// block r-1 into the right's slots, and run ahead of the reductions as far as credits allow.
// So every byte of input is read from DRAM once, every byte of output written once, and each
// chunk crosses between the cores through the shared cache: the least memory traffic a
// reduce-scatter can have (at N = 2, one copy and one reduction per chunk).
//
// Each rank writes exactly (N-1) blocks into its neighbour: S(N-1)/N bytes for equal blocks.
#pragma once

#include "collectives/window_phase.h"

namespace zrt {

class WindowReduceScatter final : public WindowPhase {
 public:
  WindowReduceScatter(const void* input, void* output, BlockLayout layout, const ReduceSpec& spec,
                      uint32_t tag_offset)
      : WindowPhase(layout, spec.element_size, tag_offset),
        input_(static_cast<const char*>(input)),
        output_(static_cast<char*>(output)),
        spec_(spec) {}

  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;
  Status start_fingerprint(TaskContext&, CollTask&) override { return Status::ok(); }

 private:
  const char* input_chunk(int block, size_t chunk) const;

  const char* input_;
  char* output_;
  ReduceSpec spec_;
};

}  // namespace zrt
