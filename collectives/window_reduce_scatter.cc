#include "collectives/window_reduce_scatter.h"

#include <algorithm>
#include <cstring>

namespace zrt {

namespace {
uint64_t chunks_per_block(const BlockLayout& layout, size_t chunk_elems) {
  return (layout.max_length() + chunk_elems - 1) / chunk_elems;
}
}  // namespace

uint32_t WindowReduceScatter::units(const BlockLayout& layout, int size, size_t element_size,
                                    size_t slot_bytes) {
  const size_t chunk_elems = std::max<size_t>(1, slot_bytes / element_size);
  return static_cast<uint32_t>(chunks_per_block(layout, chunk_elems) *
                               static_cast<uint64_t>(size - 1));
}

size_t WindowReduceScatter::chunk_count(int block, size_t chunk) const {
  return layout_.chunk_length(block, chunk, chunk_elems_);
}

const char* WindowReduceScatter::input_chunk(int block, size_t chunk) const {
  return input_ + (layout_.offset(block) + chunk * chunk_elems_) * spec_.element_size;
}

Status WindowReduceScatter::start(TaskContext& context, CollTask&) {
  next_write_ = next_consume_ = 0;
  // The window knows the slot size: start it first (units are set once they are known).
  ZRT_RETURN_IF_ERROR(window_.start(context, 0, tag_offset_));
  chunk_elems_ = window_.chunk_elements(spec_.element_size);
  unit_count_ = chunks_per_block(layout_, chunk_elems_) * static_cast<uint64_t>(context.size - 1);
  return window_.start(context, unit_count_, tag_offset_);
}

Status WindowReduceScatter::progress(TaskContext& context, CollTask& task, bool* done) {
  if (unit_count_ == 0) {
    *done = true;
    return Status::ok();
  }
  bool ready = false;
  ZRT_RETURN_IF_ERROR(window_.handshake(context, task, &ready));
  if (!ready) return Status::ok();
  const int n = context.size;
  const int rank = context.rank;
  const uint64_t steps = static_cast<uint64_t>(n - 1);
  const size_t esize = spec_.element_size;
  for (;;) {
    bool moved = false;
    ZRT_RETURN_IF_ERROR(window_.post_ready_receives(context, task, next_consume_));
    // Step-0 chunks: copies of our input block r-1, as far ahead as the credits allow.
    while (next_write_ < unit_count_ && next_write_ % steps == 0) {
      bool writable = false;
      ZRT_RETURN_IF_ERROR(window_.writable(task, next_write_, &writable));
      if (!writable) break;
      const size_t chunk = next_write_ / steps;
      const int block = ring_mod(rank - 1, n);
      const size_t bytes = chunk_count(block, chunk) * esize;
      std::memcpy(window_.right_slot(next_write_), input_chunk(block, chunk), bytes);
      ZRT_RETURN_IF_ERROR(window_.written(context, task, next_write_, bytes));
      ++next_write_;
      moved = true;
    }
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
  if (next_consume_ < unit_count_) {
    task.note_waiting(window_.left());
    return Status::ok();
  }
  return window_.drained(task, done);
}

}  // namespace zrt
