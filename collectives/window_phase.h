// WindowPhase: what the window ring phases (window_reduce_scatter.h, window_all_gather.h)
// share: the ring window, the blocks cut into slot-sized chunks that travel as units (c, k),
// u = c * (N - 1) + k, the cursors of the units written and consumed, and the frame of every
// progress call: nothing moves before the handshake has mapped the right neighbour's inbox, and
// the phase ends only once every unit was consumed and the window has drained.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/coll_task.h"
#include "collectives/ring_window.h"

namespace zrt {

class WindowPhase : public Phase {
 public:
  // Units a window phase over `layout` uses per link, so that a following phase's notification
  // tags can start after them.
  static uint32_t units(const BlockLayout& layout, int size, size_t element_size,
                        size_t slot_bytes) {
    return static_cast<uint32_t>(
        unit_count(layout, size, RingWindow::chunk_elements(slot_bytes, element_size)));
  }

 protected:
  WindowPhase(BlockLayout layout, size_t element_size, uint32_t tag_offset)
      : layout_(layout), element_size_(element_size), tag_offset_(tag_offset) {}

  // Resets the cursors and starts the window for this collective's units.
  Status start_window(TaskContext& context) {
    next_write_ = next_consume_ = 0;
    ZRT_RETURN_IF_ERROR(window_.attach(context));
    chunk_elems_ = window_.chunk_elements(element_size_);
    unit_count_ = unit_count(layout_, context.size, chunk_elems_);
    window_.start(unit_count_, tag_offset_);
    return Status::ok();
  }

  // Whether this progress call may move data: not with no units (then *done), nor before the
  // handshake is through.
  Status ready_to_move(TaskContext& context, CollTask& task, bool* ready, bool* done) {
    *ready = false;
    if (unit_count_ == 0) {
      *done = true;
      return Status::ok();
    }
    return window_.handshake(context, task, ready);
  }

  // Writes this rank's step-0 units (c, 0) into the right neighbour's inbox as far ahead as its
  // credits allow: write(chunk, slot) copies chunk c of the phase's own block into the slot and
  // returns the bytes written. *moved if any was.
  template <typename Write>
  Status write_ahead(TaskContext& context, CollTask& task, Write&& write, bool* moved) {
    const uint64_t steps = static_cast<uint64_t>(context.size - 1);
    while (next_write_ < unit_count_ && next_write_ % steps == 0) {
      bool writable = false;
      ZRT_RETURN_IF_ERROR(window_.writable(task, next_write_, &writable));
      if (!writable) break;
      const size_t bytes = write(next_write_ / steps, window_.right_slot(next_write_));
      ZRT_RETURN_IF_ERROR(window_.written(context, task, next_write_, bytes));
      ++next_write_;
      *moved = true;
    }
    return Status::ok();
  }

  // After moving what could be moved: waits on the left neighbour while units remain to be
  // consumed, then for the window to drain.
  Status finish(CollTask& task, bool* done) {
    if (next_consume_ < unit_count_) {
      task.note_waiting(window_.left());
      return Status::ok();
    }
    return window_.drained(task, done);
  }

  // Elements of chunk `chunk` of block `block`.
  size_t chunk_count(int block, size_t chunk) const {
    return layout_.chunk_length(block, chunk, chunk_elems_);
  }

  BlockLayout layout_;
  size_t element_size_;
  uint32_t tag_offset_;
  size_t chunk_elems_ = 0;
  uint64_t unit_count_ = 0;
  uint64_t next_write_ = 0;    // units written into the right neighbour's inbox
  uint64_t next_consume_ = 0;  // units read out of this rank's inbox
  RingWindow window_;

 private:
  static uint64_t unit_count(const BlockLayout& layout, int size, size_t chunk_elems) {
    const uint64_t chunks = (layout.max_length() + chunk_elems - 1) / chunk_elems;
    return chunks * static_cast<uint64_t>(size - 1);
  }
};

}  // namespace zrt
