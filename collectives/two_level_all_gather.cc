#include "collectives/two_level_all_gather.h"

#include <algorithm>

#include "collectives/two_level_fingerprint.h"

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
  for (int ring = 0; ring < kCrossRings; ++ring) {
    cross_output_[ring].assign(hosts, nullptr);
    cross_length_[ring].assign(hosts, 0);
  }
  host_ring_.init(&host_members_, local_, kHostMessageBytes, element_size_);
  for (SubringGather& ring : cross_rings_) {
    ring.init(&cross_members_, host_, kCrossMessageBytes, element_size_);
  }
  chunk_elems_ = std::max<size_t>(1, kChunkBytes / element_size_);
  chunks_ = (layout_.max_length() + chunk_elems_ - 1) / chunk_elems_;
  cross_jobs_started_ = host_jobs_started_ = 0;
  host_tag_ = cross_tag_ = tag_offset_;
  if (host_windows_) {
    // Every job of level two up front: the window numbers their units on from one to the next.
    ZRT_RETURN_IF_ERROR(host_window_.attach(context, &host_members_, local_, element_size_));
    const size_t output_bytes =
        (layout_.offset(context.size - 1) + layout_.length(context.size - 1)) * element_size_;
    host_window_.set_stream_output(output_bytes >= kStreamOutputMinBytes);
    for (size_t chunk = 0; chunk < chunks_; ++chunk) {
      for (int nth = 0; nth < hosts; ++nth) {
        const int target = host_of_job(static_cast<size_t>(nth));
        for (int j = 0; j < local; ++j) {
          const int block = grid_.rank_of(target, j);
          host_output_[j] = block_chunk(block, chunk);
          host_length_[j] = layout_.chunk_length(block, chunk, chunk_elems_);
        }
        host_window_.add_job(host_output_.data(), host_length_.data());
      }
    }
    host_window_.begin(tag_offset_, fingerprint_in_header_);
  }
  return Status::ok();
}

Status TwoLevelAllGather::start_fingerprint(TaskContext& context, CollTask& task) {
  ZRT_RETURN_IF_ERROR(start_two_level_fingerprint(context, task, grid_, layout_, element_size_,
                                                  host_windows_, &fingerprint_in_header_));
  if (fingerprint_in_header_) cross_rings_[0].carry_fingerprint();
  return Status::ok();
}

// Level one, chunk k: block (g, l) of every host g, this rank's own from the input.
bool TwoLevelAllGather::start_cross_job() {
  if (cross_jobs_started_ == chunks_) return false;
  const size_t chunk = cross_jobs_started_;
  const int ring = static_cast<int>(chunk % kCrossRings);
  if (cross_rings_[ring].active()) return false;
  for (int g = 0; g < grid_.hosts; ++g) {
    const int block = grid_.rank_of(g, local_);
    cross_output_[ring][g] = block_chunk(block, chunk);
    cross_length_[ring][g] = layout_.chunk_length(block, chunk, chunk_elems_);
  }
  cross_rings_[ring].begin(cross_output_[ring].data(), cross_length_[ring].data(),
                           own_ + chunk * chunk_elems_ * element_size_, cross_tag_);
  cross_tag_ += cross_rings_[ring].units();
  ++cross_jobs_started_;
  return true;
}

size_t TwoLevelAllGather::cross_jobs_done() const {
  // Chunk k ran on ring k % kCrossRings: every chunk before the last kCrossRings started is
  // done; of those, the oldest still active is the first not done.
  const size_t started = cross_jobs_started_;
  for (size_t chunk = started > kCrossRings ? started - kCrossRings : 0; chunk < started; ++chunk) {
    if (cross_rings_[chunk % kCrossRings].active()) return chunk;
  }
  return started;
}

bool TwoLevelAllGather::cross_active() const {
  for (const SubringGather& ring : cross_rings_) {
    if (ring.active()) return true;
  }
  return false;
}

size_t TwoLevelAllGather::host_jobs_ready() const {
  const size_t delivered = cross_jobs_done();
  return delivered * grid_.hosts + (cross_jobs_started_ > delivered ? 1 : 0);
}

// Level two, job (k, g): chunk k of host g's L blocks, once level one delivered chunk k (the own
// host's: started it).
bool TwoLevelAllGather::start_host_job() {
  if (host_ring_.active() || host_jobs_started_ == chunks_ * grid_.hosts) return false;
  if (host_jobs_started_ >= host_jobs_ready()) return false;
  const size_t chunk = host_jobs_started_ / grid_.hosts;
  const int target = host_of_job(host_jobs_started_);
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
    bool moved = false;
    while (start_cross_job()) moved = true;
    for (SubringGather& ring : cross_rings_) {
      ZRT_RETURN_IF_ERROR(ring.progress(context, task, &moved));
    }
    if (host_windows_) {
      ZRT_RETURN_IF_ERROR(host_window_.progress(context, task, host_jobs_ready(), &moved));
    } else {
      moved |= start_host_job();
      ZRT_RETURN_IF_ERROR(host_ring_.progress(context, task, &moved));
    }
    if (!moved) break;
  }
  if (cross_active()) {
    task.note_waiting(cross_rings_[0].left());
  } else if (host_windows_) {
    bool host_done = false;
    ZRT_RETURN_IF_ERROR(host_window_.finished(task, &host_done));
    if (host_done && cross_jobs_started_ == chunks_) *done = true;
    if (!host_done) task.note_waiting(host_window_.left());
  } else if (host_ring_.active()) {
    task.note_waiting(host_ring_.left());
  } else if (host_jobs_started_ == chunks_ * grid_.hosts) {
    *done = true;
  }
  return Status::ok();
}

}  // namespace zrt
