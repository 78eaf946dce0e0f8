#include "collectives/two_level_reduce_scatter.h"

#include <algorithm>

#include "collectives/two_level_fingerprint.h"
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
  for (int ring = 0; ring < kCrossRings; ++ring) {
    cross_input_[ring].assign(hosts, nullptr);
    cross_length_[ring].assign(hosts, 0);
  }

  // Slots for the rings across hosts; without windows, for level one's ring too. The rest of
  // the scratch is staging.
  const size_t cross_slots = SubringReduce::scratch_bytes(hosts, kSlotBytes);
  const size_t host_slots = host_windows_ ? 0 : SubringReduce::scratch_bytes(local, kSlotBytes);
  const size_t slots = kCrossRings * cross_slots + host_slots;
  if (context.resources == nullptr || context.resources->scratch == nullptr ||
      context.resources->scratch_bytes < slots + kDepth * hosts * spec_.element_size) {
    return Status(ZRT_INTERNAL_ERROR, "two-level reduce-scatter: stream staging memory missing");
  }
  char* scratch = static_cast<char*>(context.resources->scratch);
  const size_t cross_message = hosts == 2 ? kPairMessageBytes : kSlotBytes;
  for (int ring = 0; ring < kCrossRings; ++ring) {
    cross_rings_[ring].init(&cross_members_, host_, scratch + ring * cross_slots, cross_message,
                            spec_);
  }
  if (!host_windows_) {
    host_ring_.init(&host_members_, local_, scratch + kCrossRings * cross_slots, kSlotBytes, spec_);
  }
  staging_ = scratch + slots;
  const size_t staging_bytes = context.resources->scratch_bytes - slots;
  chunk_elems_ = std::max<size_t>(1, staging_bytes / (kDepth * hosts) / spec_.element_size);
  chunks_ = (layout_.max_length() + chunk_elems_ - 1) / chunk_elems_;
  host_jobs_started_ = cross_jobs_started_ = 0;
  host_tag_ = cross_tag_ = tag_offset_;
  const size_t esize = spec_.element_size;
  const char* input_end =
      input_ + (layout_.offset(context.size - 1) + layout_.length(context.size - 1)) * esize;
  const char* output_end = output_ + layout_.length(context.rank) * esize;
  own_partial_last_ = output_end <= input_ || output_ >= input_end;
  if (host_windows_) {
    // Every job of level one up front: the window numbers their units on from one to the next.
    ZRT_RETURN_IF_ERROR(host_window_.attach(context, &host_members_, local_, spec_.element_size));
    host_window_.set_spec(spec_, spec_.scale);
    for (size_t chunk = 0; chunk < chunks_; ++chunk) {
      for (int nth = 0; nth < hosts; ++nth) {
        const int target = host_of_job(static_cast<size_t>(nth));
        for (int j = 0; j < local; ++j) {
          const int block = grid_.rank_of(target, j);
          host_input_[j] =
              input_ + (layout_.offset(block) + chunk * chunk_elems_) * spec_.element_size;
          host_length_[j] = chunk_length(block, chunk);
        }
        host_window_.add_job(host_input_.data(), host_length_.data(), staging(chunk, target));
      }
    }
    host_window_.begin(tag_offset_, fingerprint_in_header_);
  }
  return Status::ok();
}

Status TwoLevelReduceScatter::start_fingerprint(TaskContext& context, CollTask& task) {
  ZRT_RETURN_IF_ERROR(start_two_level_fingerprint(context, task, grid_, layout_, spec_.element_size,
                                                  host_windows_, &fingerprint_in_header_));
  if (fingerprint_in_header_) cross_rings_[0].carry_fingerprint();
  return Status::ok();
}

// Level one, job (k, g): the host's inputs of chunk k of the blocks of host g's ranks, reduced
// into staging (k, g). Waits for level two to have released staging buffer k % kDepth.
bool TwoLevelReduceScatter::start_host_job() {
  if (host_ring_.active() || host_jobs_started_ == chunks_ * grid_.hosts) return false;
  const size_t chunk = host_jobs_started_ / grid_.hosts;
  const int target = host_of_job(host_jobs_started_);
  if (chunk >= cross_jobs_done() + kDepth) return false;
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
// into the output. Waits for level one to have finished chunk k for every other host; this
// host's partial comes last (release_own_partials).
bool TwoLevelReduceScatter::start_cross_job() {
  if (cross_jobs_started_ == chunks_) return false;
  const size_t chunk = cross_jobs_started_;
  const int ring = static_cast<int>(chunk % kCrossRings);
  if (cross_rings_[ring].active()) return false;
  if (host_jobs_done() < (chunk + 1) * grid_.hosts - (own_partial_last_ ? 1 : 0)) return false;
  for (int g = 0; g < grid_.hosts; ++g) {
    cross_input_[ring][g] = staging(chunk, g);
    cross_length_[ring][g] = chunk_length(grid_.rank_of(g, local_), chunk);
  }
  cross_rings_[ring].begin(cross_input_[ring].data(), cross_length_[ring].data(),
                           output_ + chunk * chunk_elems_ * spec_.element_size, 1.0, true,
                           cross_tag_);
  cross_chunk_[ring] = chunk;
  release_own_partials();
  cross_tag_ += cross_rings_[ring].units();
  ++cross_jobs_started_;
  return true;
}

void TwoLevelReduceScatter::release_own_partials() {
  const size_t done = host_jobs_done();
  for (int ring = 0; ring < kCrossRings; ++ring) {
    if (!cross_rings_[ring].active()) continue;
    cross_rings_[ring].set_own_ready(done >= (cross_chunk_[ring] + 1) * grid_.hosts);
  }
}

size_t TwoLevelReduceScatter::cross_jobs_done() const {
  // Chunk k ran on ring k % kCrossRings: every chunk before the last kCrossRings started is
  // done; of those, the oldest still active is the first not done.
  const size_t started = cross_jobs_started_;
  for (size_t chunk = started > kCrossRings ? started - kCrossRings : 0; chunk < started; ++chunk) {
    if (cross_rings_[chunk % kCrossRings].active()) return chunk;
  }
  return started;
}

bool TwoLevelReduceScatter::cross_active() const {
  for (const SubringReduce& ring : cross_rings_) {
    if (ring.active()) return true;
  }
  return false;
}

size_t TwoLevelReduceScatter::host_jobs_done() const {
  if (host_windows_) return host_window_.jobs_consumed();
  return host_jobs_started_ - (host_ring_.active() ? 1 : 0);
}

Status TwoLevelReduceScatter::progress(TaskContext& context, CollTask& task, bool* done) {
  for (;;) {
    bool moved = false;
    if (host_windows_) {
      // Outputs of level one only into staging buffers level two has released.
      const size_t limit =
          std::min(host_window_.jobs(), (cross_jobs_done() + kDepth) * grid_.hosts);
      ZRT_RETURN_IF_ERROR(host_window_.progress(context, task, limit, &moved));
    } else {
      moved = start_host_job();
      ZRT_RETURN_IF_ERROR(host_ring_.progress(context, task, &moved));
    }
    while (start_cross_job()) moved = true;
    release_own_partials();
    for (SubringReduce& ring : cross_rings_) {
      ZRT_RETURN_IF_ERROR(ring.progress(context, task, &moved));
    }
    if (!moved) break;
  }
  bool host_done = false;
  if (host_windows_) {
    ZRT_RETURN_IF_ERROR(host_window_.finished(task, &host_done));
  } else {
    host_done = !host_ring_.active();
  }
  bool own_partial_pending = false;  // a ring across hosts waits for this host's ranks
  for (const SubringReduce& ring : cross_rings_) {
    own_partial_pending |= ring.active() && !ring.own_ready();
  }
  if (cross_active() && !(own_partial_pending && !host_done)) {
    task.note_waiting(cross_rings_[0].left());
  } else if (!host_done) {
    task.note_waiting(host_windows_ ? host_window_.left() : host_ring_.left());
  } else if (cross_jobs_started_ == chunks_) {
    *done = true;
  }
  return Status::ok();
}

}  // namespace zrt
