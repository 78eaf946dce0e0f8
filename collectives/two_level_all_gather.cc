#include "collectives/two_level_all_gather.h"

#include <algorithm>

#include "collectives/two_level_fingerprint.h"

namespace zrt {

Status TwoLevelAllGather::start(TaskContext& context, CollTask&) {
  if (grid_.hosts < 2 || grid_.local < 2 || grid_.hosts * grid_.local != context.size) {
    return Status(ZRT_INTERNAL_ERROR, "two-level all-gather: host grid does not fit the ranks");
  }
  place_ranks(context);
  chunk_elems_ = std::max<size_t>(1, kChunkBytes / element_size_);
  chunks_ = (layout_.max_length() + chunk_elems_ - 1) / chunk_elems_;
  if (host_level_.windows) ZRT_RETURN_IF_ERROR(queue_window_jobs(context));
  return Status::ok();
}

// This rank's place in both levels' rings, their job arrays, and their tags from tag_offset_.
void TwoLevelAllGather::place_ranks(const TaskContext& context) {
  host_ = grid_.host_of(context.rank);
  local_ = grid_.local_of(context.rank);
  host_level_.members.resize(grid_.local);
  for (int j = 0; j < grid_.local; ++j) host_level_.members[j] = grid_.rank_of(host_, j);
  host_level_.output.assign(grid_.local, nullptr);
  host_level_.length.assign(grid_.local, 0);
  host_level_.jobs_started = 0;
  host_level_.tag = tag_offset_;
  cross_level_.place(grid_, local_, tag_offset_);
  host_level_.ring.init(&host_level_.members, local_, kHostMessageBytes, element_size_);
  for (SubringGather& ring : cross_level_.rings()) {
    ring.init(cross_level_.members(), host_, kCrossMessageBytes, element_size_);
  }
}

// Every job of level two up front: the window numbers their units on from one to the next.
Status TwoLevelAllGather::queue_window_jobs(TaskContext& context) {
  HostWindowGather& window = host_level_.window;
  ZRT_RETURN_IF_ERROR(window.attach(context, &host_level_.members, local_, element_size_));
  const size_t output_bytes =
      (layout_.offset(context.size - 1) + layout_.length(context.size - 1)) * element_size_;
  window.set_stream_output(output_bytes >= kStreamOutputMinBytes);
  for (size_t chunk = 0; chunk < chunks_; ++chunk) {
    for (int nth = 0; nth < grid_.hosts; ++nth) {
      set_host_job(chunk, host_of_job(static_cast<size_t>(nth)));
      window.add_job(host_level_.output.data(), host_level_.length.data());
    }
  }
  window.begin(tag_offset_, fingerprint_in_header_);
  return Status::ok();
}

Status TwoLevelAllGather::start_fingerprint(TaskContext& context, CollTask& task) {
  ZRT_RETURN_IF_ERROR(start_two_level_fingerprint(context, task, grid_, layout_, element_size_,
                                                  host_level_.windows, &fingerprint_in_header_));
  if (fingerprint_in_header_) cross_level_.ring(0).carry_fingerprint();
  return Status::ok();
}

void TwoLevelAllGather::set_host_job(size_t chunk, int target) {
  for (int j = 0; j < grid_.local; ++j) {
    const int block = grid_.rank_of(target, j);
    host_level_.output[j] = block_chunk(block, chunk);
    host_level_.length[j] = layout_.chunk_length(block, chunk, chunk_elems_);
  }
}

// Level one, chunk k: block (g, l) of every host g, this rank's own from the input.
bool TwoLevelAllGather::start_cross_job() {
  if (cross_level_.started() == chunks_) return false;
  const size_t chunk = cross_level_.started();
  const int ring = cross_level_.next_ring();
  if (cross_level_.ring(ring).active()) return false;
  for (int g = 0; g < grid_.hosts; ++g) {
    const int block = grid_.rank_of(g, local_);
    cross_level_.set_block(ring, g, block_chunk(block, chunk),
                           layout_.chunk_length(block, chunk, chunk_elems_));
  }
  cross_level_.ring(ring).begin(cross_level_.blocks(ring), cross_level_.lengths(ring),
                                own_ + chunk * chunk_elems_ * element_size_, cross_level_.tag());
  cross_level_.started_job(ring);
  return true;
}

size_t TwoLevelAllGather::host_jobs_ready() const {
  const size_t delivered = cross_level_.done();
  return delivered * grid_.hosts + (cross_level_.started() > delivered ? 1 : 0);
}

// Level two, job (k, g): chunk k of host g's L blocks, once level one delivered chunk k (the own
// host's: started it).
bool TwoLevelAllGather::start_host_job() {
  HostLevel& level = host_level_;
  if (level.ring.active() || level.jobs_started == chunks_ * grid_.hosts) return false;
  if (level.jobs_started >= host_jobs_ready()) return false;
  set_host_job(level.jobs_started / grid_.hosts, host_of_job(level.jobs_started));
  level.ring.begin(level.output.data(), level.length.data(), level.output[local_], level.tag);
  level.tag += level.ring.units();
  ++level.jobs_started;
  return true;
}

Status TwoLevelAllGather::progress(TaskContext& context, CollTask& task, bool* done) {
  for (;;) {
    bool moved = false;
    while (start_cross_job()) moved = true;
    for (SubringGather& ring : cross_level_.rings()) {
      ZRT_RETURN_IF_ERROR(ring.progress(context, task, &moved));
    }
    if (host_level_.windows) {
      ZRT_RETURN_IF_ERROR(host_level_.window.progress(context, task, host_jobs_ready(), &moved));
    } else {
      moved |= start_host_job();
      ZRT_RETURN_IF_ERROR(host_level_.ring.progress(context, task, &moved));
    }
    if (!moved) break;
  }
  if (cross_level_.active()) {
    task.note_waiting(cross_level_.left());
  } else if (host_level_.windows) {
    bool host_done = false;
    ZRT_RETURN_IF_ERROR(host_level_.window.finished(task, &host_done));
    if (host_done && cross_level_.started() == chunks_) *done = true;
    if (!host_done) task.note_waiting(host_level_.window.left());
  } else if (host_level_.ring.active()) {
    task.note_waiting(host_level_.ring.left());
  } else if (host_level_.jobs_started == chunks_ * grid_.hosts) {
    *done = true;
  }
  return Status::ok();
}

}  // namespace zrt
