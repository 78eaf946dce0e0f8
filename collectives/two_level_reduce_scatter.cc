#include "collectives/two_level_reduce_scatter.h"

#include <algorithm>

#include "lib/engine/stream_resources.h"

namespace zrt {

Status TwoLevelReduceScatter::start(TaskContext& context, CollTask&) {
  const int hosts = grid_.hosts;
  const int local = grid_.local;
  if (hosts < 2 || local < 2 || hosts * local != context.size) {
    return Status(ZRT_INTERNAL_ERROR, "two-level reduce-scatter: host grid does not fit the ranks");
  }
  host_ = grid_.host_of(context.rank);
  local_ = grid_.local_of(context.rank);
  host_members_.resize(local);
  for (int j = 0; j < local; ++j) host_members_[j] = grid_.rank_of(host_, j);
  cross_members_.resize(hosts);
  for (int g = 0; g < hosts; ++g) cross_members_[g] = grid_.rank_of(g, local_);
  host_input_.assign(local, nullptr);
  host_length_.assign(local, 0);
  cross_input_.assign(hosts, nullptr);
  cross_length_.assign(hosts, 0);

  const size_t slots = 2 * SubringReduce::kSlots * kSlotBytes;  // one ring's
  if (context.resources == nullptr || context.resources->scratch == nullptr ||
      context.resources->scratch_bytes < 2 * slots + kDepth * hosts * spec_.element_size) {
    return Status(ZRT_INTERNAL_ERROR, "two-level reduce-scatter: stream staging memory missing");
  }
  char* scratch = static_cast<char*>(context.resources->scratch);
  host_ring_.init(&host_members_, local_, scratch, kSlotBytes, spec_);
  cross_ring_.init(&cross_members_, host_, scratch + slots, kSlotBytes, spec_);
  staging_ = scratch + 2 * slots;
  const size_t staging_bytes = context.resources->scratch_bytes - 2 * slots;
  chunk_elems_ = std::max<size_t>(1, staging_bytes / (kDepth * hosts) / spec_.element_size);
  chunks_ = (layout_.max_length() + chunk_elems_ - 1) / chunk_elems_;
  host_jobs_started_ = cross_jobs_started_ = 0;
  host_tag_ = cross_tag_ = tag_offset_;
  return Status::ok();
}

// Level one, job (k, g): the host's inputs of chunk k of the blocks of host g's ranks, reduced
// into staging (k, g). Waits for level two to have released staging buffer k % kDepth.
bool TwoLevelReduceScatter::start_host_job() {
  if (host_ring_.active() || host_jobs_started_ == chunks_ * grid_.hosts) return false;
  const size_t chunk = host_jobs_started_ / grid_.hosts;
  const int target = static_cast<int>(host_jobs_started_ % grid_.hosts);
  const size_t cross_done = cross_jobs_started_ - (cross_ring_.active() ? 1 : 0);
  if (chunk >= cross_done + kDepth) return false;
  for (int j = 0; j < grid_.local; ++j) {
    const int block = grid_.rank_of(target, j);
    host_input_[j] = input_ + (layout_.offset(block) + chunk * chunk_elems_) * spec_.element_size;
    host_length_[j] = chunk_length(block, chunk);
  }
  host_ring_.begin(host_input_.data(), host_length_.data(), staging(chunk, target), spec_.scale,
                   false, host_tag_);
  host_tag_ += host_ring_.units();
  ++host_jobs_started_;
  return true;
}

// Level two, chunk k: the hosts' partials of chunk k of this rank's block, reduced across hosts
// into the output. Waits for level one to have finished chunk k for every host.
bool TwoLevelReduceScatter::start_cross_job() {
  if (cross_ring_.active() || cross_jobs_started_ == chunks_) return false;
  const size_t chunk = cross_jobs_started_;
  const size_t host_done = host_jobs_started_ - (host_ring_.active() ? 1 : 0);
  if (host_done < (chunk + 1) * grid_.hosts) return false;
  for (int g = 0; g < grid_.hosts; ++g) {
    cross_input_[g] = staging(chunk, g);
    cross_length_[g] = chunk_length(grid_.rank_of(g, local_), chunk);
  }
  cross_ring_.begin(cross_input_.data(), cross_length_.data(),
                    output_ + chunk * chunk_elems_ * spec_.element_size, 1.0, true, cross_tag_);
  cross_tag_ += cross_ring_.units();
  ++cross_jobs_started_;
  return true;
}

Status TwoLevelReduceScatter::progress(TaskContext& context, CollTask& task, bool* done) {
  for (;;) {
    bool moved = start_host_job();
    ZRT_RETURN_IF_ERROR(host_ring_.progress(context, task, &moved));
    moved |= start_cross_job();
    ZRT_RETURN_IF_ERROR(cross_ring_.progress(context, task, &moved));
    if (!moved) break;
  }
  if (cross_ring_.active()) {
    task.note_waiting(cross_ring_.left());
  } else if (host_ring_.active()) {
    task.note_waiting(host_ring_.left());
  } else if (cross_jobs_started_ == chunks_) {
    *done = true;
  }
  return Status::ok();
}

}  // namespace zrt
