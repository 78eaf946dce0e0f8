#include "collectives/two_level_reduce_scatter.h"

#include <algorithm>

#include "collectives/two_level_fingerprint.h"
#include "engine/stream_resources.h"

namespace zrt {

Status TwoLevelReduceScatter::start(TaskContext& context, CollTask&) {
  if (grid_.hosts < 2 || grid_.local < 2 || grid_.hosts * grid_.local != context.size) {
    return Status(ZRT_INTERNAL_ERROR, "two-level reduce-scatter: host grid does not fit the ranks");
  }
  place_ranks(context);
  ZRT_RETURN_IF_ERROR(carve_scratch(context));
  const size_t esize = spec_.element_size;
  const char* input_end =
      input_ + (layout_.offset(context.size - 1) + layout_.length(context.size - 1)) * esize;
  const char* output_end = output_ + layout_.length(context.rank) * esize;
  own_partial_last_ = output_end <= input_ || output_ >= input_end;
  if (host_level_.windows) ZRT_RETURN_IF_ERROR(queue_window_jobs(context));
  return Status::ok();
}

// This rank's place in both levels' rings, their job arrays, and their tags from tag_offset_.
void TwoLevelReduceScatter::place_ranks(const TaskContext& context) {
  host_ = grid_.host_of(context.rank);
  local_ = grid_.local_of(context.rank);
  host_level_.members.resize(grid_.local);
  for (int j = 0; j < grid_.local; ++j) host_level_.members[j] = grid_.rank_of(host_, j);
  host_level_.input.assign(grid_.local, nullptr);
  host_level_.length.assign(grid_.local, 0);
  host_level_.jobs_started = 0;
  host_level_.tag = tag_offset_;
  cross_level_.place(grid_, local_, tag_offset_);
}

// The stream's scratch memory: slots for the rings across hosts; without windows, for level
// one's ring too. The rest of the scratch is staging, which sets the chunk size.
Status TwoLevelReduceScatter::carve_scratch(const TaskContext& context) {
  const int hosts = grid_.hosts;
  const size_t cross_slots = SubringReduce::scratch_bytes(hosts, kSlotBytes);
  const size_t host_slots =
      host_level_.windows ? 0 : SubringReduce::scratch_bytes(grid_.local, kSlotBytes);
  const size_t slots = kCrossRings * cross_slots + host_slots;
  if (context.resources == nullptr || context.resources->scratch == nullptr ||
      context.resources->scratch_bytes < slots + kDepth * hosts * spec_.element_size) {
    return Status(ZRT_INTERNAL_ERROR, "two-level reduce-scatter: stream staging memory missing");
  }
  char* scratch = static_cast<char*>(context.resources->scratch);
  const size_t cross_message = hosts == 2 ? kPairMessageBytes : kSlotBytes;
  for (int ring = 0; ring < kCrossRings; ++ring) {
    cross_level_.ring(ring).init(cross_level_.members(), host_, scratch + ring * cross_slots,
                                 cross_message, spec_);
  }
  if (!host_level_.windows) {
    host_level_.ring.init(&host_level_.members, local_, scratch + kCrossRings * cross_slots,
                          kSlotBytes, spec_);
  }
  const size_t staging_bytes = context.resources->scratch_bytes - slots;
  staging_.base = scratch + slots;
  staging_.hosts = hosts;
  staging_.element_size = spec_.element_size;
  staging_.chunk_elems = std::max<size_t>(1, staging_bytes / (kDepth * hosts) / spec_.element_size);
  staging_.chunks = (layout_.max_length() + staging_.chunk_elems - 1) / staging_.chunk_elems;
  return Status::ok();
}

// Every job of level one up front: the window numbers their units on from one to the next.
Status TwoLevelReduceScatter::queue_window_jobs(TaskContext& context) {
  HostWindowReduce& window = host_level_.window;
  ZRT_RETURN_IF_ERROR(window.attach(context, &host_level_.members, local_, spec_.element_size));
  window.set_spec(spec_, spec_.scale);
  for (size_t chunk = 0; chunk < staging_.chunks; ++chunk) {
    for (int nth = 0; nth < grid_.hosts; ++nth) {
      const int target = host_of_job(static_cast<size_t>(nth));
      set_host_job(chunk, target);
      window.add_job(host_level_.input.data(), host_level_.length.data(),
                     staging_.at(chunk, target));
    }
  }
  window.begin(tag_offset_, fingerprint_in_header_);
  return Status::ok();
}

Status TwoLevelReduceScatter::start_fingerprint(TaskContext& context, CollTask& task) {
  ZRT_RETURN_IF_ERROR(start_two_level_fingerprint(context, task, grid_, layout_, spec_.element_size,
                                                  host_level_.windows, &fingerprint_in_header_));
  if (fingerprint_in_header_) cross_level_.ring(0).carry_fingerprint();
  return Status::ok();
}

void TwoLevelReduceScatter::set_host_job(size_t chunk, int target) {
  for (int j = 0; j < grid_.local; ++j) {
    const int block = grid_.rank_of(target, j);
    host_level_.input[j] =
        input_ + (layout_.offset(block) + chunk * staging_.chunk_elems) * spec_.element_size;
    host_level_.length[j] = chunk_length(block, chunk);
  }
}

// Level one, job (k, g): the host's inputs of chunk k of the blocks of host g's ranks, reduced
// into staging (k, g). Waits for level two to have released staging buffer k % kDepth.
bool TwoLevelReduceScatter::start_host_job() {
  HostLevel& level = host_level_;
  if (level.ring.active() || level.jobs_started == staging_.chunks * grid_.hosts) return false;
  const size_t chunk = level.jobs_started / grid_.hosts;
  const int target = host_of_job(level.jobs_started);
  if (chunk >= cross_level_.done() + kDepth) return false;
  set_host_job(chunk, target);
  level.ring.begin(level.input.data(), level.length.data(), staging_.at(chunk, target),
                   spec_.scale, false, level.tag);
  level.tag += level.ring.units();
  ++level.jobs_started;
  return true;
}

// Level two, chunk k: the hosts' partials of chunk k of this rank's block, reduced across hosts
// into the output. Waits for level one to have finished chunk k for every other host; this
// host's partial comes last (release_own_partials).
bool TwoLevelReduceScatter::start_cross_job() {
  if (cross_level_.started() == staging_.chunks) return false;
  const size_t chunk = cross_level_.started();
  const int ring = cross_level_.next_ring();
  if (cross_level_.ring(ring).active()) return false;
  if (host_level_.jobs_done() < (chunk + 1) * grid_.hosts - (own_partial_last_ ? 1 : 0)) {
    return false;
  }
  for (int g = 0; g < grid_.hosts; ++g) {
    cross_level_.set_block(ring, g, staging_.at(chunk, g),
                           chunk_length(grid_.rank_of(g, local_), chunk));
  }
  cross_level_.ring(ring).begin(cross_level_.blocks(ring), cross_level_.lengths(ring),
                                output_ + chunk * staging_.chunk_elems * spec_.element_size, 1.0,
                                true, cross_level_.tag());
  cross_level_.started_job(ring);
  release_own_partials();
  return true;
}

void TwoLevelReduceScatter::release_own_partials() {
  const size_t done = host_level_.jobs_done();
  for (int ring = 0; ring < kCrossRings; ++ring) {
    SubringReduce& cross = cross_level_.ring(ring);
    if (!cross.active()) continue;
    cross.set_own_ready(done >= (cross_level_.chunk_of(ring) + 1) * grid_.hosts);
  }
}

size_t TwoLevelReduceScatter::HostLevel::jobs_done() const {
  if (windows) return window.jobs_consumed();
  return jobs_started - (ring.active() ? 1 : 0);
}

Status TwoLevelReduceScatter::HostLevel::finished(CollTask& task, bool* done) {
  if (windows) return window.finished(task, done);
  *done = !ring.active();
  return Status::ok();
}

Status TwoLevelReduceScatter::progress(TaskContext& context, CollTask& task, bool* done) {
  for (;;) {
    bool moved = false;
    if (host_level_.windows) {
      // Outputs of level one only into staging buffers level two has released.
      const size_t limit =
          std::min(host_level_.window.jobs(), (cross_level_.done() + kDepth) * grid_.hosts);
      ZRT_RETURN_IF_ERROR(host_level_.window.progress(context, task, limit, &moved));
    } else {
      moved = start_host_job();
      ZRT_RETURN_IF_ERROR(host_level_.ring.progress(context, task, &moved));
    }
    while (start_cross_job()) moved = true;
    release_own_partials();
    for (SubringReduce& ring : cross_level_.rings()) {
      ZRT_RETURN_IF_ERROR(ring.progress(context, task, &moved));
    }
    if (!moved) break;
  }
  bool host_done = false;
  ZRT_RETURN_IF_ERROR(host_level_.finished(task, &host_done));
  bool own_partial_pending = false;  // a ring across hosts waits for this host's ranks
  for (const SubringReduce& ring : cross_level_.rings()) {
    own_partial_pending |= ring.active() && !ring.own_ready();
  }
  if (cross_level_.active() && !(own_partial_pending && !host_done)) {
    task.note_waiting(cross_level_.left());
  } else if (!host_done) {
    task.note_waiting(host_level_.left());
  } else if (cross_level_.started() == staging_.chunks) {
    *done = true;
  }
  return Status::ok();
}

}  // namespace zrt
