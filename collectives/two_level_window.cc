#include "collectives/two_level_window.h"

#include <algorithm>
#include <cstring>

#include "collectives/stream_copy.h"

namespace zrt {

Status HostWindowRing::attach(TaskContext& context, const std::vector<int>* members, int me,
                              size_t element_size) {
  me_ = me;
  size_ = static_cast<int>(members->size());
  element_size_ = element_size;
  ZRT_RETURN_IF_ERROR(window_.attach(context, (*members)[ring_mod(me - 1, size_)],
                                     (*members)[ring_mod(me + 1, size_)]));
  chunk_elems_ = window_.chunk_elements(element_size);
  jobs_.clear();
  blocks_.clear();
  lengths_.clear();
  unit_count_ = next_write_ = next_consume_ = 0;
  write_job_ = consume_job_ = 0;
  return Status::ok();
}

void HostWindowRing::add_job_blocks(const char* const* block, const size_t* length, char* out) {
  Job job;
  job.first_unit = unit_count_;
  job.first_block = blocks_.size();
  job.out = out;
  size_t longest = 0;
  for (int j = 0; j < size_; ++j) {
    blocks_.push_back(block[j]);
    lengths_.push_back(length[j]);
    longest = std::max(longest, length[j]);
  }
  job.units = (longest + chunk_elems_ - 1) / chunk_elems_ * static_cast<uint64_t>(size_ - 1);
  unit_count_ += job.units;
  jobs_.push_back(job);
}

void HostWindowRing::begin(uint32_t tag_offset, bool fingerprint_first) {
  window_.start(unit_count_, tag_offset, fingerprint_first);
}

size_t HostWindowRing::jobs_consumed() const {
  size_t job = consume_job_;
  while (job < jobs_.size() && jobs_[job].first_unit + jobs_[job].units <= next_consume_) ++job;
  return job;
}

HostWindowRing::Unit HostWindowRing::locate(uint64_t unit, size_t* cursor) const {
  while (jobs_[*cursor].first_unit + jobs_[*cursor].units <= unit) ++*cursor;
  const uint64_t steps = static_cast<uint64_t>(size_ - 1);
  const uint64_t in_job = unit - jobs_[*cursor].first_unit;
  return Unit{*cursor, static_cast<size_t>(in_job / steps), static_cast<int>(in_job % steps)};
}

size_t HostWindowRing::count_of(const Unit& at, int block) const {
  const size_t length = lengths_[jobs_[at.job].first_block + block];
  const size_t begin = at.chunk * chunk_elems_;
  return begin >= length ? 0 : std::min(chunk_elems_, length - begin);
}

Status HostWindowRing::ready_to_move(TaskContext& context, CollTask& task, bool* ready) {
  *ready = false;
  if (unit_count_ == 0) return Status::ok();
  return window_.handshake(context, task, ready);
}

Status HostWindowRing::finished(CollTask& task, bool* done) {
  *done = false;
  if (next_consume_ < unit_count_) return Status::ok();
  if (unit_count_ == 0) {
    *done = true;
    return Status::ok();
  }
  return window_.drained(task, done);
}

Status HostWindowReduce::progress(TaskContext& context, CollTask& task, size_t limit, bool* moved) {
  bool ready = false;
  ZRT_RETURN_IF_ERROR(ready_to_move(context, task, &ready));
  if (!ready) return Status::ok();
  const size_t esize = spec_.element_size;
  for (;;) {
    bool step_moved = false;
    ZRT_RETURN_IF_ERROR(window_.post_ready_receives(context, task, next_consume_));
    // Step-0 chunks, copies of this rank's input block me-1, need nothing but credits: they
    // run ahead into later jobs while the reader waits for a staging buffer.
    while (next_write_ < unit_count_) {
      const Unit at = locate(next_write_, &write_job_);
      if (at.step != 0) break;
      bool writable = false;
      ZRT_RETURN_IF_ERROR(window_.writable(task, next_write_, &writable));
      if (!writable) break;
      const int block = ring_mod(me_ - 1, size_);
      const size_t bytes = count_of(at, block) * esize;
      std::memcpy(window_.right_slot(next_write_), chunk_of(at, block), bytes);
      ZRT_RETURN_IF_ERROR(window_.written(context, task, next_write_, bytes));
      ++next_write_;
      step_moved = true;
    }
    // Reduce the oldest arrived chunk, in unit order, if its job's output may be written.
    if (next_consume_ < unit_count_) {
      const uint64_t unit = next_consume_;
      const Unit at = locate(unit, &consume_job_);
      const int block = ring_mod(me_ - 2 - at.step, size_);
      const size_t count = count_of(at, block);
      const bool last = at.step == size_ - 2;
      bool can = at.job < limit && (last || next_write_ == unit + 1);
      if (can && !last) ZRT_RETURN_IF_ERROR(window_.writable(task, unit + 1, &can));
      if (can) ZRT_RETURN_IF_ERROR(window_.arrived(task, unit, count * esize, &can));
      if (can) {
        char* out = last ? jobs_[at.job].out + at.chunk * chunk_elems_ * esize
                         : window_.right_slot(unit + 1);
        reduce_chunk(spec_, window_.inbox_slot(unit), at.step == 0 ? input_scale_ : 1.0,
                     chunk_of(at, block), input_scale_, out, count, false);
        if (!last) {
          ZRT_RETURN_IF_ERROR(window_.written(context, task, unit + 1, count * esize));
          ++next_write_;
        }
        ZRT_RETURN_IF_ERROR(window_.consumed(context, task, unit, count * esize));
        ++next_consume_;
        step_moved = true;
      }
    }
    if (!step_moved) break;
    *moved = true;
  }
  return Status::ok();
}

void HostWindowGather::add_job(char* const* block, const size_t* length) {
  for (int j = 0; j < size_; ++j) outputs_.push_back(block[j]);
  std::vector<const char*> in(block, block + size_);
  add_job_blocks(in.data(), length, nullptr);
}

void HostWindowGather::write_output(char* out, const char* in, size_t bytes) const {
  if (stream_output_) {
    stream_copy(out, in, bytes);
  } else {
    std::memcpy(out, in, bytes);
  }
}

Status HostWindowGather::progress(TaskContext& context, CollTask& task, size_t limit, bool* moved) {
  bool ready = false;
  ZRT_RETURN_IF_ERROR(ready_to_move(context, task, &ready));
  if (!ready) return Status::ok();
  for (;;) {
    bool step_moved = false;
    ZRT_RETURN_IF_ERROR(window_.post_ready_receives(context, task, next_consume_));
    // This rank's own block of each job, once the level across hosts delivered it.
    while (next_write_ < unit_count_) {
      const Unit at = locate(next_write_, &write_job_);
      if (at.step != 0 || at.job >= limit) break;
      bool writable = false;
      ZRT_RETURN_IF_ERROR(window_.writable(task, next_write_, &writable));
      if (!writable) break;
      const size_t bytes = count_of(at, me_) * element_size_;
      std::memcpy(window_.right_slot(next_write_), chunk_of(at, me_), bytes);
      ZRT_RETURN_IF_ERROR(window_.written(context, task, next_write_, bytes));
      ++next_write_;
      step_moved = true;
    }
    // Deliver the oldest arrived chunk, forwarding it unless its block ends here.
    if (next_consume_ < unit_count_) {
      const uint64_t unit = next_consume_;
      const Unit at = locate(unit, &consume_job_);
      const int block = ring_mod(me_ - at.step - 1, size_);
      const size_t bytes = count_of(at, block) * element_size_;
      const bool forward = at.step < size_ - 2;
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
        write_output(output_chunk(at, block), slot, bytes);
        ZRT_RETURN_IF_ERROR(window_.consumed(context, task, unit, bytes));
        ++next_consume_;
        step_moved = true;
      }
    }
    if (!step_moved) break;
    *moved = true;
  }
  return Status::ok();
}

}  // namespace zrt
