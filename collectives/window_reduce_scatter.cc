#include "collectives/window_reduce_scatter.h"

#include <algorithm>
#include <cstring>

namespace zrt {

const char* WindowReduceScatter::input_chunk(int block, size_t chunk) const {
  return input_ + (layout_.offset(block) + chunk * chunk_elems_) * spec_.element_size;
}

Status WindowReduceScatter::start(TaskContext& context, CollTask&) {
  return start_window(context);
}

Status WindowReduceScatter::progress(TaskContext& context, CollTask& task, bool* done) {
  bool ready = false;
  ZRT_RETURN_IF_ERROR(ready_to_move(context, task, &ready, done));
  if (!ready) return Status::ok();
  const int n = context.size;
  const int rank = context.rank;
  const uint64_t steps = static_cast<uint64_t>(n - 1);
  const size_t esize = spec_.element_size;
  for (;;) {
    bool moved = false;
    ZRT_RETURN_IF_ERROR(window_.post_ready_receives(context, task, next_consume_));
    // Step-0 chunks: copies of our input block r-1.
    ZRT_RETURN_IF_ERROR(write_ahead(
        context, task,
        [&](size_t chunk, char* slot) {
          const int block = ring_mod(rank - 1, n);
          const size_t bytes = chunk_count(block, chunk) * esize;
          std::memcpy(slot, input_chunk(block, chunk), bytes);
          return bytes;
        },
        &moved));
    // Reduce the oldest arrived chunk, in unit order.
    if (next_consume_ < unit_count_) {
      const uint64_t unit = next_consume_;
      const size_t chunk = unit / steps;
      const int step = static_cast<int>(unit % steps);
      const int block = ring_mod(rank - 2 - step, n);
      const size_t count = chunk_count(block, chunk);
      const bool last = step == n - 2;
      bool can = last || next_write_ == unit + 1;
      if (can && !last) ZRT_RETURN_IF_ERROR(window_.writable(task, unit + 1, &can));
      if (can) ZRT_RETURN_IF_ERROR(window_.arrived(task, unit, count * esize, &can));
      if (can) {
        char* out = last ? output_ + chunk * chunk_elems_ * esize : window_.right_slot(unit + 1);
        reduce_chunk(spec_, window_.inbox_slot(unit), step == 0 ? spec_.scale : 1.0,
                     input_chunk(block, chunk), spec_.scale, out, count, last);
        if (!last) {
          ZRT_RETURN_IF_ERROR(window_.written(context, task, unit + 1, count * esize));
          ++next_write_;
        }
        ZRT_RETURN_IF_ERROR(window_.consumed(context, task, unit, count * esize));
        ++next_consume_;
        moved = true;
      }
    }
    if (!moved) break;
  }
  return finish(task, done);
}

}  // namespace zrt
