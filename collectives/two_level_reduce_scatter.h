// Two-level reduce-scatter, for ranks on H hosts of L consecutive ranks each (two_level_grid.h).
//
// Rank r = (host h, local rank l) must end with block r. The blocks for the ranks of host g are
// contiguous, so level one is a reduce-scatter inside each host over those L blocks: local rank
// l gets the host's partial sum of block (g, l). Level two is a reduce-scatter across the hosts
// among the ranks of local rank l (one per host), over the H partials: rank (h, l) gets the sum
// of the hosts' partials of its own block. Each rank sends (L-1)/L of the data to its host's
// ranks and (H-1)/H of its L-th share across: a host sends L(H-1) blocks over the network, where
// one ring over all ranks would send N-1 of them per host link, and L links per host carry them
// at once.
//
// Reduction order (fixed, the same on every run; it differs from the flat ring's): element of
// block (h, l) = ring order across hosts of the partials, each partial in ring order inside its
// host: Σ_g over hosts starting at host h+1 and ending at h of (Σ_j over local ranks starting
// at l+1 and ending at l of x[g, j]), each Σ as SubringReduce orders it
// (two_level_ring_reduce.h).
//
// Pipelining: every block is cut into chunks of chunk_elems elements. Level one runs the jobs
// (k, g) of chunk k for every other host g, then for this host (the partial level two needs
// last: each chunk's last step adds it, SubringReduce::set_own_ready); level two runs chunk k as
// soon as level one finished chunk k for every other host, so the network carries chunk k while
// the host reduces this host's share of chunk k and then chunk k+1, and a small reduce-scatter
// costs about the longer of the two levels, not their sum. In place, level two receives into
// the output, which is then this rank's block of the input, still to be read by level one's
// own-host job; there level two waits for every job of its chunk. Level two
// keeps kCrossRings chunks in flight (one ring each, tags apart), so the network link does not
// fall idle while one chunk's ring completes and the next one's starts. Level one's partials sit
// in kDepth = kCrossRings + 1 staging buffers of H chunks each in the stream's scratch memory.
//
// Level one runs over the mapped windows (two_level_window.h) when the stream has them
// (EngineOptions::peer_windows with two_level_hosts; ZRT_WINDOWS=0: tagged messages,
// SubringReduce): every job's chunks go straight into the next local rank's inbox, the jobs one
// stream of units, so the host's ranks never wait on a drain between jobs. The order of the sums is
// the same either way.
#pragma once

#include <vector>

#include "collectives/coll_task.h"
#include "collectives/two_level_cross_rings.h"
#include "collectives/two_level_grid.h"
#include "collectives/two_level_ring_reduce.h"
#include "collectives/two_level_window.h"

namespace zrt {

class TwoLevelReduceScatter final : public Phase {
 public:
  static constexpr int kCrossRings = 2;
  static constexpr int kDepth = kCrossRings + 1;
  static constexpr size_t kSlotBytes = size_t{128} << 10;
  // Messages across two hosts, where the ring needs no slots (SubringReduce::scratch_bytes):
  // a staging chunk (682 KiB with windows) travels whole. Over tcp fewer, larger messages cost
  // less CPU per byte: whole chunks instead of 256 KiB messages took 64 MiB across 2 hosts x 2
  // from 57-59 to 47-54 ms, side by side (bench/multihost/link_profile.py; measured:
  // docs/ARCHITECTURE.md#two-level-collectives).
  static constexpr size_t kPairMessageBytes = size_t{1} << 20;

  TwoLevelReduceScatter(const void* input, void* output, BlockLayout layout, const ReduceSpec& spec,
                        HostGrid grid, uint32_t tag_offset, bool host_windows)
      : input_(static_cast<const char*>(input)),
        output_(static_cast<char*>(output)),
        layout_(layout),
        spec_(spec),
        grid_(grid),
        tag_offset_(tag_offset) {
    host_level_.windows = host_windows;
  }

  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;
  // In front of level two's first message (fingerprint_check.h).
  Status start_fingerprint(TaskContext& context, CollTask& task) override;

 private:
  // Level one: the reduce-scatter inside this host, job (k, g) of the host's inputs into
  // staging (k, g): over the mapped windows (every job queued at start), else job after job on
  // the tagged ring.
  struct HostLevel {
    bool windows = false;
    std::vector<int> members;  // this host's ranks
    SubringReduce ring;        // without windows
    HostWindowReduce window;
    size_t jobs_started = 0;  // in host_of_job's order, on the ring
    uint32_t tag = 0;
    std::vector<const char*> input;  // the job's blocks, one per local rank
    std::vector<size_t> length;

    size_t jobs_done() const;
    Status finished(CollTask& task, bool* done);
    int left() const { return windows ? window.left() : ring.left(); }
  };
  // Level one's partials, level two's inputs: kDepth buffers of H chunks each, in the stream's
  // scratch memory. A chunk is chunk_elems elements of a block, the unit both levels pipeline;
  // the longest block has `chunks` of them.
  struct Staging {
    char* base = nullptr;
    int hosts = 1;
    size_t element_size = 1;
    size_t chunk_elems = 1;
    size_t chunks = 0;
    char* at(size_t chunk, int host) const {
      return base + ((chunk % kDepth) * hosts + host) * chunk_elems * element_size;
    }
  };

  // The phases of start.
  void place_ranks(const TaskContext& context);
  Status carve_scratch(const TaskContext& context);
  Status queue_window_jobs(TaskContext& context);
  // The blocks of level one's job (chunk, host `target`) into host_level_.input / length.
  void set_host_job(size_t chunk, int target);
  bool start_host_job();
  bool start_cross_job();
  // Level one's jobs run chunk by chunk, this host's last: job i is chunk i / H of host
  // host_of_job(i).
  int host_of_job(size_t job) const {
    return static_cast<int>((static_cast<size_t>(host_) + 1 + job) %
                            static_cast<size_t>(grid_.hosts));
  }
  // Tells each running ring of level two whether level one finished its chunk's own partial.
  void release_own_partials();
  size_t chunk_length(int block, size_t chunk) const {
    return layout_.chunk_length(block, chunk, staging_.chunk_elems);
  }

  const char* input_;
  char* output_;
  BlockLayout layout_;
  ReduceSpec spec_;
  HostGrid grid_;
  uint32_t tag_offset_;
  bool fingerprint_in_header_ = false;  // start_fingerprint chose the header route
  int host_ = 0;
  int local_ = 0;
  HostLevel host_level_;
  // Level two: the reduce-scatter across hosts of the partials of this rank's block, chunk by
  // chunk into the output.
  CrossHostRings<SubringReduce, const char*, kCrossRings> cross_level_;
  Staging staging_;
  // Level two may start before the own host's partial (the output is not in the input).
  bool own_partial_last_ = false;
};

}  // namespace zrt
