#include "collectives/window_all_gather.h"

#include <algorithm>
#include <cstring>

#include "collectives/stream_copy.h"

namespace zrt {

char* WindowAllGather::output_chunk(int block, size_t chunk) const {
  return output_ + (layout_.offset(block) + chunk * chunk_elems_) * element_size_;
}

void WindowAllGather::write_output(char* out, const char* in, size_t bytes) const {
  if (stream_output_) {
    stream_copy(out, in, bytes);
  } else {
    std::memcpy(out, in, bytes);
  }
}

Status WindowAllGather::start(TaskContext& context, CollTask&) {
  ZRT_RETURN_IF_ERROR(start_window(context));
  in_place_ = own_ == output_chunk(context.rank, 0);
  const size_t output_bytes =
      (layout_.offset(context.size - 1) + layout_.length(context.size - 1)) * element_size_;
  stream_output_ = output_bytes >= kStreamOutputMinBytes;
  return Status::ok();
}

Status WindowAllGather::progress(TaskContext& context, CollTask& task, bool* done) {
  bool ready = false;
  ZRT_RETURN_IF_ERROR(ready_to_move(context, task, &ready, done));
  if (!ready) return Status::ok();
  const int n = context.size;
  const int rank = context.rank;
  const uint64_t steps = static_cast<uint64_t>(n - 1);
  for (;;) {
    bool moved = false;
    ZRT_RETURN_IF_ERROR(window_.post_ready_receives(context, task, next_consume_));
    // Our own block's chunks (out of place, into our own output block too, while in cache).
    ZRT_RETURN_IF_ERROR(write_ahead(
        context, task,
        [&](size_t chunk, char* slot) {
          const size_t bytes = chunk_count(rank, chunk) * element_size_;
          const char* source = own_ + chunk * chunk_elems_ * element_size_;
          std::memcpy(slot, source, bytes);
          if (!in_place_) write_output(output_chunk(rank, chunk), source, bytes);
          return bytes;
        },
        &moved));
    // Deliver the oldest arrived chunk, forwarding it unless its block ends here.
    if (next_consume_ < unit_count_) {
      const uint64_t unit = next_consume_;
      const size_t chunk = unit / steps;
      const int step = static_cast<int>(unit % steps);
      const int block = ring_mod(rank - step - 1, n);
      const size_t bytes = chunk_count(block, chunk) * element_size_;
      const bool forward = step < n - 2;
      bool can = !forward || next_write_ == unit + 1;
      if (can && forward) ZRT_RETURN_IF_ERROR(window_.writable(task, unit + 1, &can));
      if (can) ZRT_RETURN_IF_ERROR(window_.arrived(task, unit, bytes, &can));
      if (can) {
        const char* slot = window_.inbox_slot(unit);
        if (forward) {
          std::memcpy(window_.right_slot(unit + 1), slot, bytes);
          ZRT_RETURN_IF_ERROR(window_.written(context, task, unit + 1, bytes));
          ++next_write_;
        }
        write_output(output_chunk(block, chunk), slot, bytes);
        ZRT_RETURN_IF_ERROR(window_.consumed(context, task, unit, bytes));
        ++next_consume_;
        moved = true;
      }
    }
    if (!moved) break;
  }
  return finish(task, done);
}

}  // namespace zrt
