#include "collectives/two_level_all_gather.h"

#include <algorithm>

namespace zrt {

Status TwoLevelAllGather::start(TaskContext& context, CollTask&) {
  const int hosts = grid_.hosts;
  const int local = grid_.local;
  if (hosts < 2 || local < 2 || hosts * local != context.size) {
    return Status(ZRT_INTERNAL_ERROR, "two-level all-gather: host grid does not fit the ranks");
  }
  rank_ = context.rank;
  host_ = grid_.host_of(rank_);
  local_ = grid_.local_of(rank_);
  host_members_.resize(local);
  for (int j = 0; j < local; ++j) host_members_[j] = grid_.rank_of(host_, j);
  cross_members_.resize(hosts);
  for (int g = 0; g < hosts; ++g) cross_members_[g] = grid_.rank_of(g, local_);
  host_output_.assign(local, nullptr);
  host_length_.assign(local, 0);
  cross_output_.assign(hosts, nullptr);
  cross_length_.assign(hosts, 0);
  host_ring_.init(&host_members_, local_, kMessageBytes, element_size_);
  cross_ring_.init(&cross_members_, host_, kMessageBytes, element_size_);
  chunk_elems_ = std::max<size_t>(1, kChunkBytes / element_size_);
  chunks_ = (layout_.max_length() + chunk_elems_ - 1) / chunk_elems_;
  cross_jobs_started_ = host_jobs_started_ = 0;
  host_tag_ = cross_tag_ = tag_offset_;
  return Status::ok();
}

// Level one, chunk k: block (g, l) of every host g, this rank's own from the input.
bool TwoLevelAllGather::start_cross_job() {
  if (cross_ring_.active() || cross_jobs_started_ == chunks_) return false;
  const size_t chunk = cross_jobs_started_;
  for (int g = 0; g < grid_.hosts; ++g) {
    const int block = grid_.rank_of(g, local_);
    cross_output_[g] = block_chunk(block, chunk);
    cross_length_[g] = layout_.chunk_length(block, chunk, chunk_elems_);
  }
  cross_ring_.begin(cross_output_.data(), cross_length_.data(),
                    own_ + chunk * chunk_elems_ * element_size_, cross_tag_);
  cross_tag_ += cross_ring_.units();
  ++cross_jobs_started_;
  return true;
}

// Level two, job (k, g): chunk k of host g's L blocks, once level one delivered chunk k.
bool TwoLevelAllGather::start_host_job() {
  if (host_ring_.active() || host_jobs_started_ == chunks_ * grid_.hosts) return false;
  const size_t chunk = host_jobs_started_ / grid_.hosts;
  const int target = static_cast<int>(host_jobs_started_ % grid_.hosts);
  const size_t cross_done = cross_jobs_started_ - (cross_ring_.active() ? 1 : 0);
  if (chunk >= cross_done) return false;
  for (int j = 0; j < grid_.local; ++j) {
    const int block = grid_.rank_of(target, j);
    host_output_[j] = block_chunk(block, chunk);
    host_length_[j] = layout_.chunk_length(block, chunk, chunk_elems_);
  }
  host_ring_.begin(host_output_.data(), host_length_.data(), host_output_[local_], host_tag_);
  host_tag_ += host_ring_.units();
  ++host_jobs_started_;
  return true;
}

Status TwoLevelAllGather::progress(TaskContext& context, CollTask& task, bool* done) {
  for (;;) {
    bool moved = start_cross_job();
    ZRT_RETURN_IF_ERROR(cross_ring_.progress(context, task, &moved));
    moved |= start_host_job();
    ZRT_RETURN_IF_ERROR(host_ring_.progress(context, task, &moved));
    if (!moved) break;
  }
  if (cross_ring_.active()) {
    task.note_waiting(cross_ring_.left());
  } else if (host_ring_.active()) {
    task.note_waiting(host_ring_.left());
  } else if (host_jobs_started_ == chunks_ * grid_.hosts) {
    *done = true;
  }
  return Status::ok();
}

}  // namespace zrt
