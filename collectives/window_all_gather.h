// Window ring all-gather: the ring all-gather of ring_all_gather.h, with chunks written
// straight into the right neighbour's inbox (ring_window.h) instead of sent as tagged messages.
//
// Unit (c, k) on rank r: this rank's own block travels as units (c, 0), copied from its input
// into the right's slots (out of place, into its own output block too, while the chunk is in
// cache); the chunk of block r-k-1 arrives in inbox slot u from the left and is copied to the
// output and, if k < N-2, on into the right neighbour's slot u+1. Each chunk crosses between
// cores through the shared cache; DRAM sees each input byte read once and each output byte
// written once. The result is a bitwise copy of every rank's contribution.
//
// Outputs of kStreamOutputMinBytes or more are written with non-temporal stores (stream_copy.h).
//
// Each rank writes exactly (N-1) blocks into its neighbour: S(N-1)/N bytes for equal blocks.
#pragma once

#include "collectives/window_phase.h"

namespace zrt {

class WindowAllGather final : public WindowPhase {
 public:
  // own: this rank's contribution (== output + offset(rank) in place).
  WindowAllGather(const void* own, void* output, BlockLayout layout, size_t element_size,
                  uint32_t tag_offset)
      : WindowPhase(layout, element_size, tag_offset),
        own_(static_cast<const char*>(own)),
        output_(static_cast<char*>(output)) {}

  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;
  Status start_fingerprint(TaskContext&, CollTask&) override { return Status::ok(); }

 private:
  char* output_chunk(int block, size_t chunk) const;
  void write_output(char* out, const char* in, size_t bytes) const;

  const char* own_;
  char* output_;
  bool in_place_ = false;
  bool stream_output_ = false;  // the output exceeds the caches: written with stream_copy
};

}  // namespace zrt
